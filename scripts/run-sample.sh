#!/usr/bin/env bash
# The main job on a bundled sample: installs what is missing, builds, generates the sample
# models, inspects the GPT-style one with a predicted training step on an A100, and profiles its
# ops on this machine (the profile DB makes later runs instant).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh
/usr/bin/python3 samples/generate.py --out build/samples --only gpt
build/bin/rannc-partition inspect build/samples/gpt.trace.pt --input tokens:2x32:int64 --device a100-80g
build/bin/rannc-partition profile build/samples/gpt.trace.pt --input tokens:2x32:int64 \
  --profile-db build/samples/profile_db.json --check
