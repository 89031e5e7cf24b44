#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh
cd build
ctest --output-on-failure -j 2 "$@"
