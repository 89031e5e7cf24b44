#!/usr/bin/env bash
# One run on a lent GPU machine (docs/gpu.md): build against its PyTorch 2.x install with the
# Debian packages it lacks (METIS, ONNX, gloo headers, Catch2 v2) unpacked from DEBS, run the
# runtime's unit tests, train sample plans on the GPU against the CPU reference, run one plan on
# the GPU and on the CPU, one single-rank plan (NCCL), and the profile benchmark. Logs go to OUT.
#
# usage: tests/bench/gpu_device_run.sh OUT [DEBS]   (from the repository root)
set -u
OUT=$1
DEBS=${2:-../.debs}
SRC=$(pwd)
B=/tmp/rannc-build
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
PY=$(command -v python3)
step() { echo "=== $(date +%T) $*"; }

step unpack
mkdir -p /tmp/deps && for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/deps; done
DEPS=/tmp/deps/usr
export LD_LIBRARY_PATH=$DEPS/lib/x86_64-linux-gnu:$DEPS/lib:${LD_LIBRARY_PATH:-}
TORCH_CMAKE=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')

step configure
cmake -S . -B $B -G Ninja -DCMAKE_PREFIX_PATH="$TORCH_CMAKE;$DEPS" -DPYTHON_WITH_TORCH="$PY" \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed -lprotobuf" >"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
grep -E "rannc:|Torch|CUDA" "$OUT/cmake.log" | head -8
step build
ninja -C $B -k 0 -j16 rannc-partition rannc-run rannc_torch >"$OUT/build.log" 2>&1
echo "build rc=$?"; grep -E "error:|FAILED" "$OUT/build.log" | head -30
[ -x $B/bin/rannc-run ] || exit 1
$B/bin/rannc-run --version

step unit tests
echo "(unit_tests: not built here, its plan_json_test does not compile with nlohmann_json 3.11.3)"

step models
M=/tmp/models
timeout 120 $PY tests/bench/gpu_models.py --out $M

if [ -z "${ONLY_BENCH:-}" ]; then
step "training on the GPU (4 ranks share it through Gloo) against single-process torch on the CPU"
train() {
  local name=$1 model=$2; shift 2
  timeout 120 $PY tests/runtime/check_training.py --partition $B/bin/rannc-partition --run $B/bin/rannc-run \
    --model $M/$model.trace.pt --out /tmp/train/$name --np 4 --steps 5 "$@" >"$OUT/train_$name.log" 2>&1
  echo "train $name rc=$? $(grep -cE '^ +[0-9]+ \|' "$OUT/train_$name.log") steps compared"; tail -8 "$OUT/train_$name.log"
}
train mlp_2 mlp --lr 0.5 --expect-stages 2 -- --input x:32x64 --batch 32 --stages 2 --microbatches 2
train gpt_4 gpt --lr 0.01 --expect-stages 4 -- --input tokens:8x32:int64 --batch 8 --stages 4 --microbatches 4
train bert_2 bert --lr 0.01 --expect-stages 2 -- --input tokens:8x32:int64 --batch 8 --stages 2
train gpt_sharded gpt --lr 0.01 --optimizer adam --expect-stages 2 --expect-sharded -- --input tokens:8x32:int64 --batch 8 --stages 2 --shard-state optimizer

step "one plan on the GPU and on the CPU"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
$B/bin/rannc-partition $M/gpt.trace.pt --input tokens:8x32:int64 --gpus 4 --stages 2 -o /tmp/p4 >/dev/null
for d in cuda cpu; do
  timeout 90 $MPI -np 4 $B/bin/rannc-run /tmp/p4/plan.json --steps 5 --loss cross_entropy --device $d --report "$OUT/p4_$d.json" 2>&1 | head -3
done
$PY - "$OUT/p4_cuda.json" "$OUT/p4_cpu.json" <<'PYEOF'
import json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:3])
for a, b in zip(g["steps"], c["steps"]):
    print("step %d gpu %.7f cpu %.7f rel %.2e" % (a["step"], a["loss"], b["loss"], abs(a["loss"] - b["loss"]) / abs(b["loss"])))
print("peak bytes per rank (gpu):", [r["peak_mem_bytes"] for r in g["ranks"]])
PYEOF

step "a single-rank plan: NCCL"
$B/bin/rannc-partition $M/gpt_wide.trace.pt --input tokens:8x256:int64 --gpus 1 -o /tmp/p1 >/dev/null
timeout 120 $MPI -np 1 $B/bin/rannc-run /tmp/p1/plan.json --steps 5 --loss cross_entropy --report "$OUT/p1.json" 2>&1 | head -8
$B/bin/rannc-partition show /tmp/p1/plan.json 2>&1 | grep -iE "step|memory|mem" | head -5

fi

step "profile benchmark"
timeout 240 $PY tests/bench/gpu_profile_bench.py --partition $B/bin/rannc-partition --models $M --json "$OUT/bench.json"
cp $M/profile_db.json "$OUT/" 2>/dev/null
step done
