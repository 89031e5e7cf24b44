#!/usr/bin/env bash
# Installs the Debian packages the project builds, tests and runs with. Idempotent: when all are
# present it only checks, in well under a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache
  libtorch-dev libopenblas0-pthread          # openblas: libtorch's matmul is ~27x slower without it
  libonnx-dev libprotobuf-dev protobuf-compiler
  libmetis-dev libcli11-dev nlohmann-json3-dev catch2 libssl-dev libminizip-dev pkgconf
  libopenmpi-dev openmpi-bin libgloo-dev     # gloo headers: c10d's ProcessGroupGloo needs them
  python3-torch python3-torchvision python3-torchaudio python3-torchtext python3-onnx python3-numpy python3-jsonschema
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
