// rannc-run: executes a plan under mpirun, one process per rank (docs/contract.md, "rannc-run").
#include <CLI/CLI.hpp>

#include <iostream>

#include "cmd/usage_formatter.h"
#include "cmd/version.h"
#include "runtime/mpi_world.h"
#include "runtime/run.h"
#include "support/error.h"

namespace {

constexpr const char* kUsage = "usage: rannc-run PLAN [--steps N --data DIR --save DIR ...] (see rannc-run --help)";

// Shown under the options of --help.
constexpr const char* kExamples =
    "Examples:\n"
    "  mpirun -np 8 rannc-run rannc-out/plan.json --steps 100\n"
    "      train 100 steps on random inputs (one process per rank of the plan)\n"
    "  mpirun -np 8 rannc-run rannc-out/plan.json --steps 1000 --data data/ --save ckpt --save-every 100\n"
    "      train on .npy files, with a checkpoint every 100 steps and after the last\n"
    "  mpirun -np 8 rannc-run rannc-out/plan.json --steps 2000 --data data/ --resume ckpt --save ckpt\n"
    "      continue from the latest checkpoint in ckpt\n"
    "  rannc-out/launch.sh --steps 100 --report report.json\n"
    "      the same through the script partition wrote (mpirun -np R, from any folder)\n"
    "  cd rannc-out && sbatch job.sbatch --steps 100\n"
    "      as a SLURM job (srun --mpi=pmix; RANNC_LAUNCHER=mpirun for mpirun)";

void add_options(CLI::App& app, rannc::runtime::RunOptions& options) {
  app.add_option("PLAN", options.plan_path, "plan.json written by rannc-partition")->required();

  const std::string training = "Training";
  app.add_option("--steps", options.steps, "optimizer steps to run (default 10)")->group(training);
  app.add_option("--accumulate-steps", options.accumulate_steps,
                 "global batches whose gradients add up before each optimizer step (default 1)")->group(training);
  app.add_option("--loss", options.loss, "cross_entropy or mse against the target, for a model whose output is not a scalar loss")
      ->group(training);
  app.add_option("--optimizer", options.optimizer, "sgd, momentum (0.9) or adam (default: the plan's)")->group(training);
  app.add_option("--lr", options.lr, "learning rate (default 0.01)")->group(training);
  app.add_option("--lr-schedule", options.lr_schedule,
                 "constant (default), linear or cosine: decay to 0 at the last of --steps, after the warm-up")->group(training);
  app.add_option("--warmup-steps", options.warmup_steps, "steps of linear warm-up from 0 (default 0)")->group(training);
  app.add_option("--weight-decay", options.weight_decay, "weight decay: decoupled (AdamW) for adam, L2 for sgd (default 0)")
      ->group(training);
  app.add_option("--clip-grad-norm", options.clip_grad_norm,
                 "clip the gradients' global norm over all stages and replicas to this (default 0: off)")->group(training);

  const std::string data = "Data";
  app.add_option("--data", options.data_dir,
                 "folder of .npy files: one per model input (NAME.npy) and target.npy, dim 0 = steps x global batch "
                 "(default: random inputs from --seed)")->group(data);
  app.add_flag("--shuffle", options.shuffle, "take --data's rows in an order drawn per epoch from --seed")->group(data);
  app.add_option("--seed", options.seed, "seed of random inputs and targets, of --shuffle's order and, with the rank, of the stages' dropout (default 0)")->group(data);

  const std::string checkpoints = "Checkpoints";
  app.add_option("--save", options.save_dir,
                 "write checkpoints to this folder (DIR/step_N, DIR/latest names the last), after the last step "
                 "and every --save-every steps")->group(checkpoints);
  app.add_option("--save-every", options.save_every, "steps between checkpoints (default: only after the last step)")
      ->group(checkpoints);
  app.add_option("--resume", options.resume_dir, "continue from a checkpoint: a --save folder (its latest) or a step_N folder")
      ->group(checkpoints);
  app.add_option("--init", options.init_path, "start from a PyTorch state_dict (torch.save(model.state_dict(), FILE))")
      ->group(checkpoints);

  const std::string output = "Output";
  app.add_option("--report", options.report_path, "write per-step losses and times and per-rank measurements (JSON)")
      ->group(output);
  app.add_option("--log", options.log_path, "append a JSON line per step as it ends (step, loss, lr, ms, samples_per_s)")
      ->group(output);

  const std::string devices = "Devices and communication";
  app.add_option("--device", options.device,
                 "auto, cuda or cpu: where the stages run (default $RANNC_DEVICE, else auto: the GPUs when the plan's "
                 "device is one and this machine has them; docs/gpu.md)")->group(devices);
  app.add_option("--timeout", options.timeout_s, "seconds a rank waits for a peer before it gives up (default 300)")
      ->group(devices);
  app.add_option("--bucket-kib", options.bucket_kib,
                 "KiB of gradients per bucket of a stage with sharded state (default 25600, what the plan's memory assumes)")
      ->group(devices);
}

}  // namespace

int main(int argc, char** argv) {
  rannc::runtime::MpiWorld world(argc, argv);
  CLI::App app{"rannc-run: trains a model by the plan of rannc-partition, one process per rank under mpirun"};
  app.name("rannc-run");
  auto formatter = std::make_shared<rannc::UsageFormatter>();
  formatter->set_usage(&app, "mpirun -np R rannc-run PLAN [--steps N] [--data DIR] [--save DIR] [--resume DIR] [options]");
  app.formatter(formatter);
  rannc::runtime::RunOptions options;
  add_options(app, options);
  app.set_version_flag("--version", rannc::version_line("rannc-run"), "print the version and those of libtorch and ONNX");
  app.footer(kExamples);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments; one prints.
    if (world.rank() != 0) return e.get_exit_code() == 0 ? 0 : 2;
    // No plan: the usage, as the one error line.
    if (dynamic_cast<const CLI::RequiredError*>(&e) && options.plan_path.empty()) {
      std::cerr << "rannc-run: error: no plan given; " << kUsage << std::endl;
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return rannc::runtime::run(options, world);
  } catch (const std::exception& e) {
    std::cerr << "rannc-run: rank " << world.rank() << ": " << rannc::first_line(e.what()) << std::endl;
    world.abort(1);
  }
}
