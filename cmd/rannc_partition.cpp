// rannc-partition: the command-line entry point. Parses options, runs a verb, and turns every
// error into one line on stderr and the exit status of docs/contract.md.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <new>
#include <optional>

#include <unistd.h>

#include "compiler/cpu_calibration.h"
#include "compiler/inspect.h"
#include "compiler/model.h"
#include "compiler/partition.h"
#include "compiler/profile.h"
#include "compiler/show.h"
#include "compiler/sweep.h"
#include "compiler/export_checkpoint.h"
#include "compiler/verify.h"
#include "cmd/version.h"
#include "cost_model/cluster.h"
#include "cost_model/op_work.h"
#include "plan/plan_json.h"
#include "ir/dump.h"
#include "support/error.h"
#include "support/executable.h"
#include "support/nearest_name.h"
#include "support/progress.h"
#include "cmd/usage_formatter.h"
#include "cost_model/device.h"
#include "support/format.h"

namespace rannc {
namespace {

struct ModelOptions {
  std::string model_path;
  std::vector<std::string> input_specs;
  std::optional<std::int64_t> batch;

  LoadOptions to_load_options() const {
    LoadOptions options;
    for (const auto& text : input_specs) options.inputs.push_back(parse_input_spec(text));
    options.batch = batch;
    return options;
  }
};

// The groups of --help, in the order people look for them.
constexpr const char* kModelGroup = "Model";
constexpr const char* kClusterGroup = "Cluster (sizes take a unit: 512M, 32G, 80GiB, 1T)";
constexpr const char* kSearchGroup = "Search (the planner chooses what is not given)";
constexpr const char* kTablesGroup = "Embedding tables (recommendation models)";
constexpr const char* kOutputGroup = "Output";

void add_model_options(CLI::App& command, ModelOptions& options) {
  command.add_option("MODEL", options.model_path, "the model: TorchScript (.pt), ONNX (.onnx) or torch.export (.pt2), told apart by content")
      ->required()
      ->group(kModelGroup);
  command.add_option("--input", options.input_specs,
                     "example input NAME:DIMS[:DTYPE], batch dim first, DTYPE float32 unless given, e.g. tokens:8x128:int64 "
                     "(once per input; needed where the model file does not fix its shapes)")
      ->group(kModelGroup);
  command.add_option("--batch", options.batch,
                     "the global batch: samples per training step over all devices (default: dim 0 of the first --input)")
      ->group(kModelGroup);
}

// --progress and --quiet of the verbs that plan.
struct ProgressFlags {
  bool progress = false;
  bool quiet = false;
  Progress to_progress() const { return Progress("rannc-partition", progress_when(progress, quiet)); }
};

void add_progress_flags(CLI::App& app, ProgressFlags& flags) {
  app.add_flag("--progress", flags.progress, "print each planning phase on stderr (default: on a terminal, past a second)")
      ->group(kOutputGroup);
  app.add_flag("--quiet", flags.quiet, "print no progress")->group(kOutputGroup);
}

void print_json(const nlohmann::json& json, int indent) {
  std::cout << json.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

struct InspectOptions {
  ModelOptions model;
  bool json = false;
  bool dump_ir = false;
  std::optional<std::string> device;
  std::optional<std::string> cluster_file;
  std::string precision = "fp32";
  std::string optimizer = "adam";
  std::string profile_db;
  std::string attention = "unfused";
  std::string elementwise = "unfused";
};

// The cost options of inspect, checked before the model is read.
std::optional<CostQuery> cost_query(const InspectOptions& options) {
  auto precision = plan::parse_precision(options.precision, "--precision");
  auto optimizer = plan::parse_optimizer(options.optimizer, "--optimizer");
  auto attention = plan::parse_fusion(options.attention, "--attention");
  auto elementwise = plan::parse_fusion(options.elementwise, "--elementwise");
  bool refines = options.precision != "fp32" || options.optimizer != "adam" || !options.profile_db.empty() ||
                 attention != plan::Fusion::kUnfused || elementwise != plan::Fusion::kUnfused;
  if (!options.device && !options.cluster_file) {
    if (refines)
      throw InputError("--precision, --optimizer, --profile-db, --attention and --elementwise refine a prediction: add "
                       "--device or --cluster");
    return std::nullopt;
  }
  cost::ClusterFlags flags;
  flags.device = options.device;
  flags.cluster_file = options.cluster_file;
  cost::Cluster cluster = cost::cluster_from_flags(flags);
  CostQuery query{cluster.device, precision, optimizer, {}, attention, elementwise};
  cost::check_precision_supported(query.device, query.precision);
  if (!options.profile_db.empty()) query.profile_db = cost::ProfileDb::load(options.profile_db, /*must_exist=*/true);
  query.device = with_this_cpu(query.device, query.profile_db ? &*query.profile_db : nullptr);  // last: a mistake above fails first
  return query;
}

// An op kind without a formula is costed, never silently free, but the user should know.
void warn_uncosted(const ir::Graph& graph) {
  auto kinds = cost::uncosted_kinds(graph);
  if (kinds.empty()) return;
  std::string list;
  for (const auto& kind : kinds) list += (list.empty() ? "" : ", ") + kind;
  std::cerr << "rannc-partition: warning: no cost formula for " << kinds.size() << " op kind(s), costed as memory-bound: "
            << list << "\n";
}

int run_inspect(const InspectOptions& options) {
  auto query = cost_query(options);
  Model model = load_model(options.model.model_path, options.model.to_load_options());
  if (query) warn_uncosted(model.graph);
  if (options.dump_ir && options.json) {
    print_json(ir::graph_to_json(model.graph), 1);
  } else if (options.dump_ir) {
    std::cout << ir::graph_to_text(model.graph);
  } else if (options.json) {
    print_json(inspect_json(model, query ? &*query : nullptr), 2);
  } else {
    std::cout << inspect_text(model, query ? &*query : nullptr);
  }
  return 0;
}

struct ProfileCommandOptions {
  ModelOptions model;
  ProfileOptions profile;
  bool json = false;
};

int run_profile_command(ProfileCommandOptions& options) {
  options.profile.model_path = options.model.model_path;
  options.profile.load = options.model.to_load_options();
  options.profile.progress = !options.json && ::isatty(STDERR_FILENO);
  if (options.profile.reps < 1) throw InputError("--reps " + std::to_string(options.profile.reps) + ": must be at least 1");
  ProfileReport report = run_profile(options.profile);
  if (options.json) print_json(profile_report_json(report), 2);
  else std::cout << profile_report_text(report);
  return 0;
}

struct PartitionCommandOptions {
  ModelOptions model;
  PartitionOptions partition;
  bool json = false;
  ProgressFlags progress;
};

// What a plan is asked for, beside the device count: shared by partition and sweep.
void add_request_options(CLI::App& app, PartitionOptions& p) {
  auto& flags = p.cluster;
  app.add_option("--mem", flags.mem, "memory per device, e.g. 32G (default: the device preset's)")->group(kClusterGroup);
  app.add_option("--host-mem", flags.host_mem, "host memory per node for offloaded state (default: the preset's usual node)")
      ->group(kClusterGroup);
  app.add_option("--gpus-per-node", flags.gpus_per_node, "devices per node (default min(8, --gpus))")->group(kClusterGroup);
  app.add_option("--device", flags.device, "device preset, default a100-80g: " + join(cost::device_preset_names()))->group(kClusterGroup);
  app.add_option("--stages", p.stages, "force the number of pipeline stages")->group(kSearchGroup);
  app.add_option("--microbatches", p.microbatches, "force the microbatch count per pipeline")->group(kSearchGroup);
  app.add_option("--schedule", p.schedule, "1f1b (default) or gpipe")->group(kSearchGroup);
  app.add_option("--shard-state", p.shard_state,
                 "auto (default: chosen per stage), none or optimizer: split the optimizer state among a stage's replicas")
      ->group(kSearchGroup);
  app.add_option("--recompute", p.recompute,
                 "auto (default: chosen per stage), none, selective (the attention cores) or full (the whole forward): what each "
                 "stage runs again in backward instead of keeping")
      ->group(kSearchGroup);
  app.add_option("--tensor-parallel", p.tensor_parallel,
                 "largest tensor-parallel degree, splitting layers over a node's devices (1: none; default: a node's "
                 "devices on a GPU, 1 on the cpu device)")
      ->group(kSearchGroup);
  app.add_option("--context-parallel", p.context_parallel,
                 "largest context-parallel degree, splitting each sample's sequence over a node's devices with ring "
                 "attention (default 1: none; rannc-run does not run it)")
      ->group(kSearchGroup);
  app.add_option("--sequence-parallel", p.sequence_parallel,
                 "on (default: norms, residual adds and dropout between the split regions run on 1/T of the sequence "
                 "of a tensor-parallel group, Megatron-LM's way) or off (whole on each of its devices)")
      ->group(kSearchGroup);
  app.add_option("--optimizer", p.optimizer, "sgd, momentum or adam (default): optimizer state memory")->group(kSearchGroup);
  app.add_option("--precision", p.precision, "fp32 (default), bf16-mixed or fp16-mixed")->group(kSearchGroup);
  app.add_option("--attention", p.attention,
                 "how the training stack runs attention cores: unfused (op by op, as rannc-run; default) or fused (one "
                 "FlashAttention-style kernel: plans for Megatron-LM/NeMo-like stacks; rannc-run refuses them)")
      ->group(kSearchGroup);
  app.add_option("--elementwise", p.elementwise,
                 "how the training stack runs connected elementwise ops: unfused (op by op, as rannc-run; default) or "
                 "fused (one kernel each, as Megatron-LM's bias-GELU and bias-dropout-add or torch.compile; rannc-run "
                 "refuses the plan)")
      ->group(kSearchGroup);
  app.add_option("--profile-db", p.profile_db, "calibrate the costs with this profile DB (written by `profile`)")
      ->group(kSearchGroup);
}


// The default verb's options live on the top-level app: `rannc-partition MODEL --gpus N ...`.
void add_partition_options(CLI::App& app, PartitionCommandOptions& options) {
  add_model_options(app, options.model);
  app.get_option("MODEL")->required(false);
  auto& p = options.partition;
  app.add_option("--gpus", p.cluster.gpus, "total devices in the job (default 1)")->group(kClusterGroup);
  app.add_option("--cluster", p.cluster.cluster_file,
                 "cluster description JSON (in place of --gpus, --mem, --host-mem, --gpus-per-node, --device)")
      ->group(kClusterGroup);
  add_request_options(app, p);
  app.add_option("--layout", p.layout,
                 "plan exactly this layout, pp=STAGES,dp=PIPELINES[,m=MICROBATCHES][,tp=DEGREE][,vp=CHUNKS] (pp x dp x tp = --gpus; vp: interleaved model chunks per stage), "
                 "and compare it with the free plan")
      ->group(kSearchGroup);
  app.add_flag("--explain", p.explain, "also print the layouts that lost, by how much, and what ruled out the rest")
      ->group(kSearchGroup);
  auto& tables = p.sharding;
  app.add_flag("--no-table-sharding", [&tables](std::int64_t) { tables.enabled = false; },
               "plan pooled embedding tables as ops of the pipeline instead of sharding them")
      ->group(kTablesGroup);
  app.add_option("--table-constraints", tables.table_constraints,
                 "JSON of per-table pooling, allowed sharding types and tier (docs/contract.md)")
      ->group(kTablesGroup);
  app.add_option("--comm-dtype", tables.comm_dtype, "fp32 (default), fp16 or bf16: the pooled embeddings' all-to-all")
      ->group(kTablesGroup);
  app.add_option("--comm-dtype-bwd", tables.comm_dtype_bwd, "fp32, fp16 or bf16: its gradients' (default: as --comm-dtype)")
      ->group(kTablesGroup);
  app.add_option("--sparse-optimizer", tables.sparse_optimizer,
                 "sgd, momentum, adam or rowwise_adagrad (default): the embedding tables' optimizer")
      ->group(kTablesGroup);
  app.add_option("-o,--out", p.out_dir, "output folder (default rannc-out)")->group(kOutputGroup);
  app.add_flag("--plan-only", p.plan_only, "write plan.json without stage files (a model whose weights are not in the file)")
      ->group(kOutputGroup);
  app.add_flag("--no-check", [&p](std::int64_t) { p.check = false; },
               "write plan.json without first checking the stage files against the model")
      ->group(kOutputGroup);
  app.add_option_function<std::string>(
         "--check-limit", [&p](const std::string& size) { p.check_limit_bytes = cost::parse_size(size, "--check-limit"); },
         "check the stage files only when the weights take at most this much (default 2G)")
      ->group(kOutputGroup);
  app.add_flag("--json", options.json, "print the plan as JSON (show --json's fields and how it was planned)")
      ->group(kOutputGroup);
  add_progress_flags(app, options.progress);
}

int run_partition_command(PartitionCommandOptions& options) {
  if (options.model.model_path.empty()) throw InputError("MODEL is required (see rannc-partition --help)");
  options.partition.model_path = options.model.model_path;
  options.partition.load = options.model.to_load_options();
  options.partition.runtime_folder = executable_folder().string();
  options.partition.progress = options.progress.to_progress();
  PartitionReport report = run_partition(options.partition);
  if (options.json) print_json(report.summary, 2);
  else std::cout << report.text;
  return 0;
}

struct SweepCommandOptions {
  ModelOptions model;
  SweepOptions sweep;
  bool json = false;
  ProgressFlags progress;
};

CLI::App* add_sweep_command(CLI::App& app, SweepCommandOptions& options) {
  auto* command = app.add_subcommand("sweep", "plan the model on each of several device counts: a table, JSON or CSV");
  add_model_options(*command, options.model);
  command->add_option("--gpus", options.sweep.gpus,
                      "the device counts, e.g. 8,16,32,64; or a mix of presets, e.g. a100-40g:16,h100-80g:16 (each kind "
                      "alone, then the mix)")
      ->delimiter(',')
      ->required()
      ->group(kClusterGroup);
  add_request_options(*command, options.sweep.partition);
  command->add_option("--csv", options.sweep.csv_path, "also write the rows as CSV to this file")->group(kOutputGroup);
  command->add_flag("--json", options.json, "print the rows as JSON")->group(kOutputGroup);
  add_progress_flags(*command, options.progress);
  return command;
}

int run_sweep_command(SweepCommandOptions& options) {
  options.sweep.partition.model_path = options.model.model_path;
  options.sweep.partition.load = options.model.to_load_options();
  options.sweep.partition.progress = options.progress.to_progress();
  SweepReport report = run_sweep(options.sweep);
  if (options.json) print_json(report.rows, 2);
  else std::cout << report.text;
  return 0;
}

struct VerifyCommandOptions {
  VerifyOptions verify;
  std::string model_path;
  bool json = false;
};

void add_verify_command(CLI::App& app, VerifyCommandOptions& options, CLI::App*& command) {
  command = app.add_subcommand("verify", "chain the stage files and compare outputs and gradients with the model");
  command->add_option("PLAN", options.verify.plan_path, "plan.json written by the partition")->required();
  command->add_option("--model", options.model_path, "the model, when it is no longer at the plan's path");
  command->add_option("--tolerance", options.verify.tolerance, "largest relative difference accepted (default 1e-5)");
  command->add_option("--seed", options.verify.seed, "seed of the random inputs and output gradients (default 0)");
  command->add_option_function<std::string>(
      "--float64-limit",
      [&options](const std::string& size) { options.verify.float64_limit_bytes = cost::parse_size(size, "--float64-limit"); },
      "check the model itself against float64 only when its weights take at most this much in float64 (default 2G)");
  command->add_flag("--json", options.json, "print the result as JSON");
}

// Exit 1 when a difference is beyond the tolerance (docs/contract.md: the request is not met).
int run_verify_command(VerifyCommandOptions& options) {
  if (!options.model_path.empty()) options.verify.model_path = options.model_path;
  VerifyOutcome outcome = run_verify(options.verify);
  if (options.json) print_json(outcome.summary, 2);
  else std::cout << outcome.text;
  return outcome.passed ? 0 : static_cast<int>(ExitStatus::kCannotMeet);
}

void add_export_command(CLI::App& app, ExportOptions& options, CLI::App*& command) {
  command = app.add_subcommand("export", "merge a rannc-run checkpoint into the model's state_dict for PyTorch");
  command->add_option("CHECKPOINT", options.checkpoint, "a checkpoint folder, or a --save folder (its latest)")->required();
  command->add_option("-o,--output", options.output, "the state_dict file (default state_dict.pt)");
  command->add_option("--module", options.module_output, "also write the TorchScript model with the trained weights");
  command->add_option("--model", options.model_path, "the model, when it is no longer at the plan's path");
}

struct ShowOptions {
  std::string plan_path;
  bool json = false;
};

int run_show(const ShowOptions& options) {
  plan::Plan plan = plan::read_plan_file(options.plan_path);
  // show needs no stage files (a plan is often looked at without them), but those present must
  // be the ones the plan was written with.
  for (const auto& stage : plan.stages) {
    std::error_code ec;
    if (std::filesystem::exists(plan.stage_path(stage), ec)) plan::check_stage_file(plan, stage);
  }
  if (options.json) print_json(show_json(plan), 2);
  else std::cout << show_text(plan);
  return 0;
}

constexpr const char* kUsage =
    "rannc-partition MODEL --gpus N [--mem SIZE] [options]    (plan: writes rannc-out/)\n"
    "       rannc-partition inspect | profile | show | verify | sweep | export | help [COMMAND] ...";

// Examples and the next step, at the end of each command's --help.
constexpr const char* kPartitionFooter =
    "Examples:\n"
    "  rannc-partition model.pt --input x:256x3x224x224 --gpus 64 --mem 80G\n"
    "  rannc-partition gpt.onnx --input tokens:512x2048:int64 --gpus 512 --device h100-80g --precision bf16-mixed --explain\n"
    "  rannc-partition model.pt2 --gpus 64 --layout pp=8,dp=8,m=32      (Megatron-style, beside the free plan)\n"
    "  rannc-partition model.pt --input x:32x3x224x224 --gpus 4 --device cpu   (train on this machine's CPUs)\n"
    "Next: rannc-partition show rannc-out/plan.json; run with rannc-out/launch.sh (mpirun) or\n"
    "sbatch rannc-out/job.sbatch (Slurm); rannc-run --help. The README has the whole path.";
constexpr const char* kInspectFooter =
    "Examples:\n"
    "  rannc-partition inspect model.pt --input x:8x3x224x224\n"
    "  rannc-partition inspect gpt.onnx --device h100-80g --precision bf16-mixed   (predict a step on one device)\n"
    "  rannc-partition inspect model.pt2 --dump-ir";
constexpr const char* kProfileFooter =
    "Examples:\n"
    "  rannc-partition profile model.pt --input x:8x3x224x224 --profile-db cpu.json --check\n"
    "Next: rannc-partition model.pt ... --profile-db cpu.json";
constexpr const char* kShowFooter = "Example:\n  rannc-partition show rannc-out/plan.json";
constexpr const char* kVerifyFooter =
    "Example:\n  rannc-partition verify rannc-out/plan.json --tolerance 1e-4\n"
    "Exit status 1 when a difference is beyond the tolerance.";
constexpr const char* kSweepFooter =
    "Example:\n  rannc-partition sweep gpt.onnx --gpus 8,16,32,64 --mem 40G --csv sweep.csv";
constexpr const char* kExportFooter =
    "Examples:\n"
    "  rannc-partition export checkpoints -o state_dict.pt\n"
    "  python3 -c 'import torch; m = MyModel(); m.load_state_dict(torch.load(\"state_dict.pt\"))'";

// The command line as a shell takes it back, for plan.json: the tool's name, not its path.
plan::Generator generator(int argc, char** argv) {
  std::vector<std::string> words{"rannc-partition"};
  for (int i = 1; i < argc; ++i) words.push_back(shell_word(argv[i]));
  return {"rannc-partition", version_number(), join(words, " ")};
}

// `help` and `help COMMAND`: the usage of the tool (with the default verb, `partition`) or of one
// command, on stdout. `tool_help` is taken before parsing: once a command is parsed, the app's
// help() is that command's.
int run_help(CLI::App& app, const std::string& tool_help, const std::string& topic) {
  if (topic.empty() || topic == "partition") {
    std::cout << tool_help;
    return 0;
  }
  CLI::App* command = nullptr;
  try {
    command = app.get_subcommand(topic);
  } catch (const CLI::OptionNotFound&) {
  }
  if (!command || topic == "help") {
    throw InputError("help " + topic + ": no such command (commands: partition, inspect, profile, show, verify, sweep, export)");
  }
  std::cout << command->help(app.get_name());
  return 0;
}

// " (did you mean --gpus?)" for the first unknown option near one of the command's, or "".
std::string suggestion_for_unknown(const CLI::App& app) {
  const CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  std::vector<std::string> names;
  for (const CLI::Option* option : command->get_options())
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
  for (const auto& unknown : app.remaining(/*recurse=*/true)) {
    if (unknown.rfind("--", 0) != 0) continue;
    std::string word = unknown.substr(0, unknown.find('='));
    if (auto near = nearest_name(word, names)) return " (did you mean " + *near + "?)";
  }
  return "";
}

int run(int argc, char** argv) {
  // Nothing to do: the usage, as the one error line (exit 2).
  if (argc < 2) {
    throw InputError("no model or command given; usage: rannc-partition MODEL --gpus N [--mem SIZE] [options], or a command "
                     "(see rannc-partition --help)");
  }
  CLI::App app{"rannc-partition: plans hybrid pipeline/data-parallel training of a PyTorch model on a cluster"};
  app.name("rannc-partition");
  auto formatter = std::make_shared<UsageFormatter>();
  formatter->label("OPTIONS", "OPTIONS");
  app.formatter(formatter);  // before the commands: each takes its parent's
  formatter->set_usage(&app, kUsage);
  app.footer(kPartitionFooter);
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", version_line("rannc-partition"), "print the version and those of libtorch and ONNX");
  PartitionCommandOptions partition;
  add_partition_options(app, partition);
  partition.partition.generator = generator(argc, argv);
  InspectOptions inspect;
  auto* inspect_command = app.add_subcommand("inspect", "show the ops, parameters, shapes and FLOPs of a model");
  add_model_options(*inspect_command, inspect.model);
  formatter->set_usage(inspect_command, "rannc-partition inspect MODEL [--input NAME:DIMS[:DTYPE] ...] [--device NAME] [--json]");
  inspect_command->footer(kInspectFooter);
  inspect_command->add_flag("--json", inspect.json, "print JSON (see docs/contract.md)");
  inspect_command->add_flag("--dump-ir", inspect.dump_ir, "print the lowered IR graph, one op a line (with --json: every value and op as JSON)");
  inspect_command->add_option("--device", inspect.device, "also predict a training step on this device preset");
  inspect_command->add_option("--cluster", inspect.cluster_file, "like --device, with the device of this cluster JSON");
  inspect_command->add_option("--precision", inspect.precision, "fp32, bf16-mixed or fp16-mixed (with --device)");
  inspect_command->add_option("--optimizer", inspect.optimizer, "sgd, momentum or adam: optimizer state in the memory prediction");
  inspect_command->add_option("--profile-db", inspect.profile_db, "calibrate the prediction with this profile DB");
  inspect_command->add_option("--attention", inspect.attention, "unfused or fused: as partition's (with --device)");
  inspect_command->add_option("--elementwise", inspect.elementwise, "unfused or fused: as partition's (with --device)");

  ProfileCommandOptions profile;
  auto* profile_command = app.add_subcommand("profile", "time each distinct op of a TorchScript model on this machine");
  add_model_options(*profile_command, profile.model);
  formatter->set_usage(profile_command, "rannc-partition profile MODEL --input ... [--profile-db FILE] [--check] [--json]");
  profile_command->footer(kProfileFooter);
  profile_command->add_option("--profile-db", profile.profile.db_path, "read and extend this profile DB (JSON)");
  profile_command->add_option("--reps", profile.profile.reps, "timed repetitions per op (default 5)");
  profile_command->add_flag("--check", profile.profile.check, "also time whole training steps and compare with the prediction");
  profile_command->add_flag("--json", profile.json, "print the report as JSON");
  ShowOptions show;
  auto* show_command = app.add_subcommand("show", "summarise a plan.json: stages, ranks per node, predicted time and memory");
  formatter->set_usage(show_command, "rannc-partition show PLAN [--json]");
  show_command->footer(kShowFooter);
  show_command->add_option("PLAN", show.plan_path, "plan.json written by the partition verb")->required();
  show_command->add_flag("--json", show.json, "print a JSON summary");
  VerifyCommandOptions verify;
  CLI::App* verify_command = nullptr;
  add_verify_command(app, verify, verify_command);
  formatter->set_usage(verify_command, "rannc-partition verify PLAN [--model MODEL] [--tolerance X] [--json]");
  verify_command->footer(kVerifyFooter);
  ExportOptions export_options;
  CLI::App* export_command = nullptr;
  add_export_command(app, export_options, export_command);
  formatter->set_usage(export_command, "rannc-partition export CHECKPOINT [-o state_dict.pt] [--module FILE]");
  export_command->footer(kExportFooter);
  SweepCommandOptions sweep;
  auto* sweep_command = add_sweep_command(app, sweep);
  formatter->set_usage(sweep_command, "rannc-partition sweep MODEL --gpus N,N,... [partition's cluster and search options]");
  sweep_command->footer(kSweepFooter);
  std::string help_topic;
  auto* help_command = app.add_subcommand("help", "print this help, or a command's (help inspect)");
  formatter->set_usage(help_command, "rannc-partition help [COMMAND]");
  help_command->add_option("COMMAND", help_topic, "partition, inspect, profile, show, verify, sweep or export");
  const std::string tool_help = app.help();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();  // the parsed command's, if any
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ExtrasError& e) {
    throw InputError(first_line(e.what()) + suggestion_for_unknown(app) + " (see rannc-partition --help)");
  } catch (const CLI::ParseError& e) {
    throw InputError(first_line(e.what()) + " (see rannc-partition --help)");
  }
  if (help_command->parsed()) return run_help(app, tool_help, help_topic);
  if (inspect_command->parsed()) return run_inspect(inspect);
  if (profile_command->parsed()) return run_profile_command(profile);
  if (show_command->parsed()) return run_show(show);
  if (verify_command->parsed()) return run_verify_command(verify);
  if (export_command->parsed()) {
    std::cout << run_export(export_options) << "\n";
    return 0;
  }
  if (sweep_command->parsed()) return run_sweep_command(sweep);
  return run_partition_command(partition);
}

}  // namespace
}  // namespace rannc

int main(int argc, char** argv) {
  constexpr const char* kPrefix = "rannc-partition: error: ";
  try {
    return rannc::run(argc, argv);
  } catch (const rannc::Error& e) {
    std::cerr << kPrefix << e.what() << "\n";
    return static_cast<int>(e.status());
  } catch (const std::bad_alloc&) {
    std::cerr << kPrefix << "out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << kPrefix << rannc::first_line(e.what()) << "\n";
  }
  return static_cast<int>(rannc::ExitStatus::kBadInput);
}
