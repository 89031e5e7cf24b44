"""Data sets and single-process reference training for the rannc-run tests.

make_data() writes the `--data` folder rannc-run reads (one NAME.npy per model input plus
target.npy, dim 0 = steps x global batch); reference_losses() trains the unpartitioned TorchScript
model on the same data with plain torch SGD (or Adam), a sharded plan's embedding tables with its
sparse optimizer (FusedSparse), and returns the loss of every step, computed before that step's
update, as rannc-run must report it.

With `accumulate` (models with BatchNorm, whose statistics depend on which samples are forwarded
together) the reference forwards the global batch the way the plan cuts it: pipeline p's
microbatch i is rows [(p*M + i)*m, +m) of the step; each pipeline's chunks add up their gradients,
and the pipelines' sums are added in pipeline order before the one optimizer step, the order in
which rannc-run's allreduce over 2 pipelines adds them (float addition is not associative, and the
ResNet-50 sample amplifies last-bit differences: see check_training.py). Every chunk's loss is its summed loss over the loss elements of the whole
global batch, so the step's loss and gradients equal those of one mean over the global batch.
"""
import math
import os

# One thread, like each rank under the tests' mpirun: reductions split among threads, and kernels
# chosen for another thread count, round differently. It must be set before torch starts.
os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F

# Debian's PyTorch 2.6 fuses TorchScript ops on the CPU with LLVM, which other builds (libtorch 1.13,
# the pip wheels) leave off; its compile of the MLP sample's backward, at the third step, does not
# finish on Debian 13. Off, as elsewhere.
torch._C._jit_override_can_fuse_on_cpu(False)

LOSSES = ("cross_entropy", "mse")


def _model_output(result):
    """The model's output tensor (the first one when the model returns a tuple or list)."""
    while isinstance(result, (tuple, list)):
        result = result[0]
    return result


def _load_inputs(plan, folder):
    return [np.load(os.path.join(folder, spec["name"] + ".npy"), mmap_mode="r") for spec in plan["model"]["inputs"]]


def make_data(plan, steps, loss, folder, seed, rows=None):
    """Writes NAME.npy per model input and target.npy: `rows` samples, by default `steps` steps of
    the plan's global batch."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = rows or steps * plan["batch"]["global"]
    for spec in plan["model"]["inputs"]:
        if spec.get("batch_dim", 0) != 0:
            raise ValueError(f"input {spec['name']}: batch dim {spec['batch_dim']}, only 0 is supported")
        shape = [rows] + list(spec["shape"][1:])
        if spec["dtype"].startswith("float"):
            data = rng.standard_normal(shape).astype(spec["dtype"])
        else:
            data = rng.integers(0, spec.get("index_bound", 2), size=shape).astype(spec["dtype"])
        np.save(os.path.join(folder, spec["name"] + ".npy"), data)

    # The output's shape per sample, from the plan (a TorchScript or an ONNX model alike).
    output = next(o for stage in plan["stages"] for o in stage["outputs"] if o.get("model_output"))
    per_sample = [d for k, d in enumerate(output["shape"]) if k != output.get("batch_dim", 0)]
    if loss == "cross_entropy":
        classes = per_sample[-1]
        target = rng.integers(0, classes, size=[rows] + per_sample[:-1]).astype(np.int64)
    else:
        target = rng.standard_normal([rows] + per_sample).astype(np.float32)
    np.save(os.path.join(folder, "target.npy"), target)


MASK64 = (1 << 64) - 1


def epoch_permutation(n, seed, epoch):
    """runtime/data_order.cpp's permutation of 0..n-1: Fisher-Yates over splitmix64."""
    order = list(range(n))
    state = (seed ^ ((epoch + 1) * 0xD1B54A32D192ED03)) & MASK64
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def step_rows(rows, batch, step, shuffle_seed=None):
    """The data set rows of a step's samples, as rannc-run takes them: whole steps of each epoch,
    in order or (shuffle_seed given) in that epoch's permutation."""
    steps_per_epoch = rows // batch
    epoch, first = divmod(step, steps_per_epoch)
    positions = range(first * batch, (first + 1) * batch)
    if shuffle_seed is None:
        return list(positions)
    order = epoch_permutation(rows, shuffle_seed, epoch)
    return [order[p] for p in positions]


def _loss_sum(out, target, loss):
    """The loss of a chunk summed over its loss elements."""
    if loss == "cross_entropy":
        classes = out.shape[-1]
        return F.cross_entropy(out.reshape(-1, classes), target.reshape(-1), reduction="sum")
    return F.mse_loss(out, target, reduction="sum")


OPTIMIZERS = ("sgd", "momentum", "adam")
SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(schedule, step, warmup, total):
    """Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup, as rannc-run's --lr-schedule."""
    if step < warmup:
        return step / max(1, warmup)
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


MOMENTUM = 0.9  # rannc-run's --optimizer momentum


def make_optimizer(params, name, lr, weight_decay):
    """torch.optim as rannc-run builds it: Adam with weight decay is AdamW, SGD's is L2."""
    if name == "adam":
        if weight_decay > 0:
            return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=MOMENTUM if name == "momentum" else 0.0, weight_decay=weight_decay)


ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, as rannc-run's
ROWWISE_ADAGRAD_EPS = 1e-8                 # as rannc-run's (and FBGEMM's exact row-wise Adagrad)
SPARSE_STATES = {"sgd": 0, "momentum": 1, "adam": 2, "rowwise_adagrad": 1}  # tensors of state per table


class FusedSparse:
    """A sharded plan's sparse optimizer on its embedding tables, as rannc-run's fused sparse update
    applies it: a step changes only the rows it looked up, each by the sum of its gradients, with
    torch.optim's arithmetic on those rows (sgd, momentum; adam, AdamW with a weight decay) or
    row-wise Adagrad (one accumulator per row, of the mean squared gradient over its columns; no
    weight decay). Other rows keep their weights and state: momentum and Adam's moments move a row
    only in steps that look it up (torch.optim.SparseAdam's and FBGEMM's semantics, not dense
    torch.optim's), and weight decay applies to the rows looked up; Adam's bias correction counts
    every step. The rows looked up are taken as those with a non-zero gradient: a row looked up whose
    gradient is exactly zero would step here and not in rannc-run, which shows as a loss mismatch."""

    def __init__(self, params, name, lr, weight_decay):
        self.params, self.name, self.lr, self.weight_decay = list(params), name, lr, weight_decay
        self.steps = 0
        per_row = name == "rowwise_adagrad"
        self.state = [[torch.zeros(p.shape[0] if per_row else p.shape) for _ in range(SPARSE_STATES[name])]
                      for p in self.params]

    def step(self, factor):
        self.steps += 1
        with torch.no_grad():
            for p, state in zip(self.params, self.state):
                if p.grad is None:
                    continue
                rows = p.grad.ne(0).any(1).nonzero().squeeze(1)
                weights, moved = p[rows], [s[rows] for s in state]
                self._step_rows(weights, p.grad[rows], moved, self.lr * factor)
                p[rows] = weights
                for s, m in zip(state, moved):
                    s[rows] = m

    def _step_rows(self, w, g, state, lr):
        decay = self.weight_decay
        if self.name == "rowwise_adagrad":
            state[0].add_(g.pow(2).mean(1))
            w.sub_(lr * g / (state[0].sqrt() + ROWWISE_ADAGRAD_EPS).unsqueeze(1))
        elif self.name == "adam":
            (b1, b2), t = ADAM_BETAS, self.steps
            if decay > 0:
                w.mul_(1 - lr * decay)
            state[0].mul_(b1).add_(g, alpha=1 - b1)
            state[1].mul_(b2).addcmul_(g, g, value=1 - b2)
            w.addcdiv_(state[0], (state[1].sqrt() / math.sqrt(1 - b2 ** t)).add_(ADAM_EPS), value=-lr / (1 - b1 ** t))
        else:
            step = g.add(w, alpha=decay) if decay else g
            if self.name == "momentum":
                step = state[0].mul_(MOMENTUM).add_(step)
            w.add_(step, alpha=-lr)


def table_names(plan):
    """The embedding tables of a sharded plan (they step with its sparse optimizer)."""
    return {t["name"] for t in plan.get("sharding", {}).get("tables", [])}


def reference_losses(model_path, data_folder, plan, steps, loss, lr, accumulate=False, optimizer_name="sgd",
                     weight_decay=0.0, clip_grad_norm=0.0, schedule="constant", warmup_steps=0, first_step=0,
                     shuffle_seed=None, bf16_autocast=False):
    """Trains the whole model in one process with torch.optim (make_optimizer), the learning-rate
    schedule and gradient clipping; returns each step's loss (before its update).

    lr 0 gives the losses of the untrained model, forward only: what a run that never updates would report.
    `first_step` starts on that step's data (the losses of steps first_step..steps-1); the data set
    is taken as step_rows() says (epochs, and a shuffle with shuffle_seed). bf16_autocast: forward
    under torch.autocast("cpu", dtype=torch.bfloat16), the loss in fp32 (a bf16-mixed plan).
    """
    torch.manual_seed(0)
    model = torch.jit.load(model_path)
    model.train()
    # A sharded plan's tables step with its sparse optimizer, the rest with optimizer_name.
    tables = table_names(plan)
    dense = [p for n, p in model.named_parameters() if n not in tables]
    table_params = [p for n, p in model.named_parameters() if n in tables]
    optimizer = make_optimizer(dense, optimizer_name, lr, weight_decay)
    table_optimizer = None
    if table_params:
        table_optimizer = FusedSparse(table_params, plan["sharding"]["sparse_optimizer"], lr, weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: lr_factor(schedule, k, warmup_steps, steps))
    inputs = _load_inputs(plan, data_folder)
    target = np.load(os.path.join(data_folder, "target.npy"), mmap_mode="r")
    batch = plan["batch"]
    B, M, m, pipelines = batch["global"], batch["microbatches"], batch["microbatch_size"], batch["pipelines"]
    if pipelines * M * m != B:
        raise ValueError(f"plan batch: {pipelines} pipelines x {M} microbatches x {m} != {B}")
    # Chunks per gradient sum: with accumulate, one list of microbatches per pipeline, whose sums
    # are then added pipeline by pipeline, as the runtime's allreduce of 2 ranks adds them.
    if accumulate:
        groups = [[((p * M + i) * m, m) for i in range(M)] for p in range(pipelines)]
    else:
        groups = [[(0, B)]]
    params = [q for q in model.parameters() if q.requires_grad]

    def rows(array, indices):
        return torch.from_numpy(np.array(array[indices]))

    # Loss elements per sample: the target's elements for cross entropy, the output's for mse.
    per_sample = int(np.prod(target.shape[1:], dtype=np.int64))
    elements = B * per_sample
    losses = []
    for step in range(first_step, steps):
        order = np.array(step_rows(len(target), B, step, shuffle_seed))
        total = 0.0
        sums = [None] * len(params)
        for chunks in groups:
            for q in params:  # every parameter's, the tables' too
                q.grad = None
            for begin, length in chunks:
                indices = order[begin:begin + length]
                with torch.set_grad_enabled(lr != 0):  # lr 0: the losses without any update, forward only
                    # The TorchScript model runs unoptimized under autocast, as rannc-run runs stage
                    # files: the optimizing executor's own autocast pass casts other ops than the
                    # dispatcher's autocast, which an eager nn.Module gets (nn.TransformerEncoder's
                    # first loss differs by 9e-5 between the two).
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16_autocast), \
                            torch.jit.optimized_execution(not bf16_autocast):
                        out = _model_output(model(*[rows(x, indices) for x in inputs]))
                    chunk_loss = _loss_sum(out.float(), rows(target, indices), loss) / elements
                if lr != 0:
                    chunk_loss.backward()
                total += float(chunk_loss.detach().double())
            for k, q in enumerate(params):
                if q.grad is not None:
                    sums[k] = q.grad.clone() if sums[k] is None else sums[k] + q.grad
        if lr != 0:
            for q, g in zip(params, sums):
                q.grad = g
            if clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_([q for q in params if q.grad is not None], clip_grad_norm)
            factor = lr_factor(schedule, step, warmup_steps, steps)
            optimizer.step()
            if table_optimizer is not None:
                table_optimizer.step(factor)
            scheduler.step()
        losses.append(total)
    return losses
