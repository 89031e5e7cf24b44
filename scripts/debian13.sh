#!/usr/bin/env bash
# The second platform: builds this tree on Debian 13 (trixie: libtorch 2.6, ONNX 1.17, Catch2 3,
# OpenMPI 5, GCC 14) and runs the tests labelled "debian13" there, against PyTorch 2.6.
# Everything lives in a debootstrap root outside the clone: the packages, the build folder and
# its ccache, so that a machine that keeps the root rebuilds in seconds. Each step is skipped when
# already done. Needs root (debootstrap, mount, chroot); arguments go to ctest (e.g. -R 'unit:').
#   RANNC_DEBIAN13_ROOT  the root (default /var/cache/rannc-partition/debian13-root)
#   RANNC_DEBIAN_MIRROR  the Debian archive (default: the one the host's apt uses)
set -eEuo pipefail
trap 'echo "scripts/debian13.sh: line $LINENO failed: $BASH_COMMAND" >&2' ERR
src=$(cd "$(dirname "$0")/.." && pwd)
root=${RANNC_DEBIAN13_ROOT:-/var/cache/rannc-partition/debian13-root}
build=/var/cache/rannc/build     # inside the root, like the ccache
ccache_dir=/var/cache/rannc/ccache

fail() { echo "scripts/debian13.sh: $*" >&2; exit 1; }

# scripts/install-deps.sh's list, less torchaudio and torchtext (Debian 13 has no torchtext; the
# third-party corpus that needs them does not run here).
packages=(
  build-essential cmake ninja-build ccache
  libtorch-dev libopenblas0-pthread          # openblas: libtorch's matmul is ~27x slower without it
  libonnx-dev libprotobuf-dev protobuf-compiler
  libmetis-dev libcli11-dev nlohmann-json3-dev catch2 libssl-dev libminizip-dev pkgconf
  libopenmpi-dev openmpi-bin libgloo-dev
  python3-torch python3-torchvision python3-onnx python3-numpy python3-jsonschema
)

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, mount, chroot): run it as root or with sudo"

# The Debian archive the host's apt uses (deb822 or one-line sources), not its security archive.
host_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '/^URIs:/ {print $2} /^deb / {sub(/\[[^]]*\] */, ""); print $2}' | grep -v -m 1 security || true
}
# Only debootstrap and apt need the mirror: a root that has everything builds offline.
check_mirror() {
  mirror=${RANNC_DEBIAN_MIRROR:-$(host_mirror)}
  [ -n "$mirror" ] || fail "no Debian mirror in the host's apt sources; set RANNC_DEBIAN_MIRROR"
  if command -v wget >/dev/null && ! wget -q -O /dev/null "$mirror/dists/trixie/InRelease"; then
    fail "no trixie at the mirror $mirror (dists/trixie/InRelease unreachable); set RANNC_DEBIAN_MIRROR"
  fi
}

# Runs a command in the root with a clean environment (the host's PATH, locale, ... mean nothing there).
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    CCACHE_DIR="$ccache_dir" "$@"
}

# Prints how long each step took, as it ends and all together at the end.
times=()
start=$SECONDS
lap() {
  times+=("$1 $((SECONDS - start)) s")
  echo "debian13: $1 took $((SECONDS - start)) s"
  start=$SECONDS
}

make_root() {
  # debootstrap removes $root/debootstrap/ when it has finished.
  [ -x "$root/usr/bin/apt-get" ] && [ ! -d "$root/debootstrap" ] && return
  # A fresh host has none: installed like scripts/install-deps.sh installs the build's packages.
  if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null ||
      fail "debootstrap is not installed and apt-get could not install it"
  fi
  check_mirror
  if [ -d "$root/debootstrap" ]; then
    # Half-made by an earlier run: made again, but never removed through a mount (/dev, the clone).
    grep -qs " $root/" /proc/mounts && fail "$root is half-made and has mounts inside; unmount them"
    rm -rf "$root"
  elif [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
    fail "$root is neither a Debian root nor empty; remove it or set RANNC_DEBIAN13_ROOT"
  fi
  debootstrap --variant=minbase trixie "$root" "$mirror" || fail "debootstrap into $root failed"
}

# Mounts what the build and the tests need, each unless something is mounted there already (a
# mount made before this run stays). This run's mounts go when it ends, however it ends.
mounted=()
# shellcheck disable=SC2317  # called by the EXIT trap
unmount_ours() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"  # lazy: a process left inside
  done
}
mount_once() {
  local target=$root/$1
  shift
  mountpoint -q "$target" && return
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}
mount_all() {
  mount_once proc -t proc proc
  mount_once sys -t sysfs sysfs
  mount_once dev --bind /dev
  mount_once dev/pts --bind /dev/pts
  # Read-only: nothing run in the root can change the clone.
  mount_once src -o bind,ro "$src"
  [ "$(stat -c %d:%i "$root/src")" = "$(stat -c %d:%i "$src")" ] ||
    fail "$root/src is another folder mounted before this run; unmount it"
}

install_packages() {
  local installed missing=() package
  # dpkg-query fails when one is unknown to dpkg; it still lists the others.
  # shellcheck disable=SC2016  # dpkg-query's format, not shell
  installed=" $({ in_root dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' "${packages[@]}" 2>/dev/null || true; } |
                awk '$1 == "ii" {printf "%s ", $2}')"
  for package in "${packages[@]}"; do
    [[ $installed == *" $package "* ]] || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return
  check_mirror
  echo "debian13: installing ${missing[*]}"
  cp /etc/resolv.conf "$root/etc/resolv.conf"  # the host's name servers, as of now
  in_root apt-get update -q
  in_root DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

build_tree() {
  in_root mkdir -p "$build" "$ccache_dir"
  if [ ! -f "$root$build/build.ninja" ]; then
    in_root cmake -S /src -B "$build" -G Ninja
  fi
  # Under the host's build lock, which other builds on this machine take too: two jobs in all
  # (a unit that includes torch needs about 1 GB).
  { flock 8; in_root ninja -C "$build" -j 2; } 8>/tmp/rannc-build.lock
}

run_tests() {
  # OpenMPI 5 runs as root only when told to; the tests run as root in the root. libgomp's threads
  # spin while they wait, which on 2 busy cores makes libtorch 2.6 run verify ~10x slower (25 s
  # against 2 s for the GPT sample's stage files); waiting passively they do not.
  in_root OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive \
    ctest --test-dir "$build" -L debian13 -j 2 --output-on-failure "$@"
}

mkdir -p "$(dirname "$root")"
# One run at a time per root: two would share mounts, apt's lock and the build folder.
exec 9>"$root.lock"
flock -n 9 || { echo "debian13: waiting for another run on $root"; flock 9; }
trap unmount_ours EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

make_root
lap debootstrap
mount_all
install_packages
lap packages
build_tree
lap build
status=0
run_tests "$@" || status=$?
lap tests
echo "debian13: ${times[*]/%/,} root $root"
exit $status
