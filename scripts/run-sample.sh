#!/usr/bin/env bash
# The main job on a bundled sample: installs what is missing, builds, generates the sample
# models and inspects the GPT-style one.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh
/usr/bin/python3 samples/generate.py --out build/samples --only gpt
build/bin/rannc-partition inspect build/samples/gpt.trace.pt --input tokens:2x32:int64
