#!/usr/bin/env bash
# One run on a lent GPU machine (docs/gpu.md): build against its PyTorch 2.x install with the
# Debian packages it lacks (METIS, ONNX, gloo headers, minizip, Catch2 v2) unpacked from DEBS,
# train sample plans on the GPU against the CPU reference (4 ranks sharing it through Gloo, with
# the pass timer and the overlap of transfers), run one plan on the GPU and on the CPU, the
# profile benchmark (predicted against measured step and peak), the
# reuse of its profile DB, and rannc-run against a plain libtorch loop. Logs and the profile DB
# go to OUT; the summary tables are printed last.
#
# usage: tests/bench/gpu_device_run.sh OUT [DEBS]   (from the repository root; DEBS: .debs)
#        PARTS="bench reuse" tests/bench/gpu_device_run.sh OUT   runs those parts alone (of: bench
#        anatomy reuse overhead train; all by default)
# The .deb files: apt-get download libmetis5 libmetis-dev libonnx1 libonnx-dev libonnxifi
#                 libgloo-dev catch2 libminizip1 libminizip-dev   (Debian 12)
set -u
OUT=$1
DEBS=${2:-.debs}
B=/tmp/rannc-build
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
PY=$(command -v python3)
step() { echo "=== $(date +%T) $*"; }
PARTS=${PARTS:-bench anatomy reuse overhead train}
part() { [[ " $PARTS " == *" $1 "* ]]; }
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

step versions
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUMMARY"
$PY -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))' | tee -a "$SUMMARY"
PRESET=$($PY -c 'import torch; n = torch.cuda.get_device_name(0); print("h200" if "H200" in n else "h100-80g")')

step unpack
mkdir -p /tmp/deps && for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/deps; done
DEPS=/tmp/deps/usr
export LD_LIBRARY_PATH=$DEPS/lib/x86_64-linux-gnu:$DEPS/lib:${LD_LIBRARY_PATH:-}
TORCH_CMAKE=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')

step configure
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_CMAKE;$DEPS" -DPYTHON_WITH_TORCH="$PY" \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed -lprotobuf" >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
grep -E "rannc:|Torch|CUDA" "$OUT/build.log" | head -8
step build
ninja -C $B -k 0 -j16 rannc-partition rannc-run rannc_torch plain_training_loop >>"$OUT/build.log" 2>&1
echo "build rc=$?"; grep -E "error:|FAILED" "$OUT/build.log" | head -30
[ -x $B/bin/rannc-run ] || exit 1
$B/bin/rannc-run --version

step models
M=/tmp/models
timeout 300 $PY tests/bench/gpu_models.py --out $M

if part bench; then
step "profile benchmark"
timeout 420 $PY tests/bench/gpu_profile_bench.py --partition $B/bin/rannc-partition --models $M --json "$OUT/bench.json" \
  | tee "$OUT/bench.txt"
cp $M/profile_db.json "$OUT/"
fi

if part anatomy; then
step "what bounds a step: its kernels against its wall time"
timeout 180 $PY tests/bench/gpu_step_anatomy.py --models $M 2>&1 | tee "$OUT/anatomy.txt"
fi

if part reuse; then
step "the profile DB reused"
{
  echo "profile DB reused (no GPU visible to the second run):"
  CUDA_VISIBLE_DEVICES= $B/bin/rannc-partition profile $M/gpt_wide.trace.pt --input tokens:8x256:int64 \
    --profile-db $M/profile_db.json --json | $PY -c 'import json,sys; r=json.load(sys.stdin); print("  profile again: model loaded %s, op signatures timed %d, %.2f s" % (r["model_loaded"], r["timed"], r["seconds"]))'
  start=$(date +%s%N)
  CUDA_VISIBLE_DEVICES= $B/bin/rannc-partition $M/gpt_wide.trace.pt --input tokens:8x256:int64 --gpus 8 --device $PRESET \
    --profile-db $M/profile_db.json -o /tmp/pdb >/dev/null &&
    echo "  partition with it for 8 x $PRESET: $(( ($(date +%s%N) - start) / 1000000 )) ms, no GPU visible"
} 2>&1 | tee -a "$SUMMARY"
fi

if part overhead; then
step "rannc-run against a plain libtorch loop, one GPU"
timeout 420 $PY tests/bench/runtime_bench.py $B $M --gpu $PRESET --steps 20 --repeats 3 2>&1 | tee "$OUT/overhead.txt"
fi

TRAIN=$OUT/train.log
: >"$TRAIN"
if part train; then
step "training on the GPU (4 ranks share it through Gloo) against single-process torch on the CPU"
train() {
  local name=$1 model=$2; shift 2
  echo "--- $name" >>"$TRAIN"
  timeout 150 $PY tests/runtime/check_training.py --partition $B/bin/rannc-partition --run $B/bin/rannc-run \
    --model $M/$model.trace.pt --out /tmp/train/$name --np 4 --steps 5 "$@" >>"$TRAIN" 2>&1
  local rc=$?
  echo "train $name rc=$rc $(sed -n "/^--- $name\$/,\$p" "$TRAIN" | grep -cE '^ +[0-9]+ \|') steps compared" | tee -a "$SUMMARY"
  sed -n "/^--- $name\$/,\$p" "$TRAIN" | tail -4
}
train gpt_4 gpt --lr 0.01 --expect-stages 4 -- --input tokens:8x32:int64 --batch 8 --stages 4 --microbatches 4
train gpt_sharded gpt --lr 0.01 --optimizer adam --expect-stages 2 --expect-sharded -- --input tokens:8x32:int64 --batch 8 --stages 2 --shard-state optimizer

step "one plan on the GPU and on the CPU"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
$B/bin/rannc-partition $M/gpt.trace.pt --input tokens:8x32:int64 --gpus 4 --stages 2 -o /tmp/p4 >/dev/null
for d in cuda cpu; do
  timeout 90 $MPI -np 4 $B/bin/rannc-run /tmp/p4/plan.json --steps 5 --loss cross_entropy --device $d --report "/tmp/p4_$d.json" 2>&1 | head -3
done
$PY - /tmp/p4_cuda.json /tmp/p4_cpu.json <<'PYEOF' | tee -a "$SUMMARY"
import json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:3])
worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(g["steps"], c["steps"]))
print("gpt 2 stages x 2 pipelines, cuda against cpu: losses within %.1e over %d steps" % (worst, len(g["steps"])))
print("  peak bytes per rank (gpu):", [r["peak_mem_bytes"] for r in g["ranks"]],
      "fwd/bwd ms per rank:", [(round(r["fwd_ms"], 2), round(r["bwd_ms"], 2)) for r in g["ranks"]])
PYEOF

fi


step done
echo; cat "$SUMMARY"; echo
for f in bench anatomy overhead; do [ -f "$OUT/$f.txt" ] && sed -n '/^device:/,$p;/^model/,$p' "$OUT/$f.txt" | uniq; done
