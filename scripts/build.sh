#!/usr/bin/env bash
# Installs what is missing, configures once and builds into build/: the targets named
# (scripts/build.sh rannc-partition rannc-run), or everything, tests included.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja
fi
# Two jobs: each TU that includes torch headers needs about 1 GB.
ninja -C build -j 2 "$@"
