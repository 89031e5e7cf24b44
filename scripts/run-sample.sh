#!/usr/bin/env bash
# The main job on a bundled sample: installs what is missing, builds, generates the sample
# models, and plans the GPT-style one on 8 devices whose memory (40 MiB) is too small for the
# whole model, so the plan is a pipeline; writes rannc-out/ (plan.json, one stage file per
# stage, launch.sh, job.sbatch, schedule.svg, stages.dot), shows the plan, verifies the
# stage files against the model and trains 3 steps of the plan with rannc-run (8 ranks on this
# machine, random tokens). Then it inspects the model with a predicted A100 training
# step and profiles its ops on this machine (the profile DB makes later runs instant).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh rannc-partition rannc-run  # the tools only: no test binary
/usr/bin/python3 samples/generate.py --out build/samples --only gpt
build/bin/rannc-partition build/samples/gpt.trace.pt --input tokens:64x32:int64 --gpus 8 --mem 40M -o rannc-out
build/bin/rannc-partition show rannc-out/plan.json
build/bin/rannc-partition verify rannc-out/plan.json
OMP_NUM_THREADS=1 RANNC_RUN=build/bin/rannc-run MPIRUN="mpirun --allow-run-as-root --oversubscribe" \
  rannc-out/launch.sh --steps 3 --loss cross_entropy --report rannc-out/report.json
build/bin/rannc-partition inspect build/samples/gpt.trace.pt --input tokens:2x32:int64 --device a100-80g
build/bin/rannc-partition profile build/samples/gpt.trace.pt --input tokens:2x32:int64 \
  --profile-db build/samples/profile_db.json --check
