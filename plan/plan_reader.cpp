#include "plan/plan_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "ir/dtype.h"
#include "support/error.h"
#include "support/input_file.h"
#include "support/sha256.h"

namespace rannc::plan {
namespace {

using nlohmann::json;

const char* type_name(const json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "null";
}

// A JSON value with its path in the document ("stages[1].inputs[0]"), so that every check
// can name the field at fault.
class Field {
 public:
  Field(const json& value, std::string where, const std::string& file)
      : value_(value), where_(std::move(where)), file_(file) {}

  [[noreturn]] void fail(const std::string& problem) const { throw InputError(label() + ": " + problem); }

  const std::string& where() const { return where_; }
  const json& raw() const { return value_; }
  bool has(const char* key) const { return value_.contains(key); }

  // "FILE: WHERE" for messages made elsewhere.
  std::string label() const { return file_ + (where_.empty() ? "" : ": " + where_); }

  Field operator[](const char* key) const {
    if (!value_.is_object()) fail("expected an object, found " + std::string(type_name(value_)));
    auto it = value_.find(key);
    if (it == value_.end()) throw InputError(file_ + ": " + child_path(key) + ": missing");
    return Field(*it, child_path(key), file_);
  }
  std::optional<Field> find(const char* key) const {
    if (!has(key)) return std::nullopt;
    return (*this)[key];
  }

  // The elements of an array, each with its index in the path.
  std::vector<Field> items() const {
    if (!value_.is_array()) fail("expected an array, found " + std::string(type_name(value_)));
    std::vector<Field> list;
    for (std::size_t i = 0; i < value_.size(); ++i) list.emplace_back(value_[i], where_ + "[" + std::to_string(i) + "]", file_);
    return list;
  }

  std::string text() const {
    if (!value_.is_string()) expected("a string");
    return value_.get<std::string>();
  }
  bool flag() const {
    if (!value_.is_boolean()) expected("a boolean");
    return value_.get<bool>();
  }
  double number() const {
    if (!value_.is_number()) expected("a number");
    return value_.get<double>();
  }
  std::int64_t integer(std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                       std::int64_t max = std::numeric_limits<std::int64_t>::max()) const {
    if (!value_.is_number_integer()) expected("an integer");
    if (value_.is_number_unsigned() && value_.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) out_of(min, max);
    auto n = value_.get<std::int64_t>();
    if (n < min || n > max) out_of(min, max);
    return n;
  }
  int small(int min = 0, int max = std::numeric_limits<int>::max()) const { return static_cast<int>(integer(min, max)); }
  double non_negative() const {
    double x = number();
    if (!(x >= 0)) fail(json_excerpt(value_) + ": must not be negative");
    return x;
  }

 private:
  std::string child_path(const char* key) const { return where_.empty() ? key : where_ + "." + key; }
  [[noreturn]] void expected(const char* what) const {
    fail("expected " + std::string(what) + ", found " + type_name(value_) + (value_.is_null() ? "" : " " + json_excerpt(value_)));
  }
  [[noreturn]] void out_of(std::int64_t min, std::int64_t max) const {
    std::string range = max == std::numeric_limits<std::int64_t>::max() || max == std::numeric_limits<int>::max()
                            ? "at least " + std::to_string(min)
                            : "in " + std::to_string(min) + ".." + std::to_string(max);
    fail(json_excerpt(value_) + ": must be " + range);
  }

  const json& value_;
  std::string where_;
  const std::string& file_;
};

json parse_document(const std::string& path) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw InputError(path + ": no such file");
  if (!std::filesystem::is_regular_file(status)) throw InputError(path + ": not a regular file");
  std::string content = read_regular_file(path, kMaxJsonFileBytes, "a plan");
  if (content.empty()) throw InputError(path + ": empty file, not a plan");
  check_json_depth(content, path);
  try {
    return json::parse(content);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, ..." without the bracketed id
    // (also numbers out of range, e.g. 1e400).
    std::string what = first_line(e.what());
    auto close = what.find("] ");
    throw InputError(path + ": not valid JSON (truncated?): " + clip(close == std::string::npos ? what : what.substr(close + 2)));
  }
}

// "format" and "version" first: a foreign or newer file gets that said, not a missing field.
void check_header(const Field& document) {
  if (!document.raw().is_object()) document.fail("not a plan: expected a JSON object, found " + std::string(type_name(document.raw())));
  if (!document.has("format")) document.fail("format: missing (not a rannc plan)");
  std::string format = document["format"].text();
  if (format != kFormat) document["format"].fail("'" + text_excerpt(format) + "' is not " + kFormat);
  auto version = document["version"].integer();
  if (version != kVersion) {
    document["version"].fail(std::to_string(version) + " is not supported (this build reads version " +
                             std::to_string(kVersion) + ")");
  }
}

Tensor read_tensor(const Field& field) {
  Tensor tensor;
  tensor.name = field["name"].text();
  for (const auto& dim : field["shape"].items()) tensor.shape.push_back(dim.integer(0));
  tensor.dtype = field["dtype"].text();
  // Only the names the writer spells ("float32", not the CLI's alias "fp32"), as the schema says.
  auto dtype = ir::parse_dtype(tensor.dtype);
  if (!dtype || ir::dtype_name(*dtype) != tensor.dtype)
    field["dtype"].fail("'" + text_excerpt(tensor.dtype) + "' is not a dtype");
  tensor.batch_dim = field["batch_dim"].small(-1);
  if (tensor.batch_dim >= static_cast<int>(tensor.shape.size())) {
    field["batch_dim"].fail(std::to_string(tensor.batch_dim) + " is not a dim of a " + std::to_string(tensor.shape.size()) +
                            "-dim tensor");
  }
  return tensor;
}

std::vector<Tensor> read_tensors(const Field& list) {
  std::vector<Tensor> tensors;
  for (const auto& field : list.items()) tensors.push_back(read_tensor(field));
  return tensors;
}

std::vector<Weight> read_weights(const Field& list) {
  std::vector<Weight> weights;
  for (const auto& field : list.items()) {
    Weight weight;
    weight.name = field["name"].text();
    weight.stage_name = field["stage_name"].text();
    weight.numel = field["numel"].integer(0);
    weight.bytes = field["bytes"].integer(0);
    if (auto shared = field.find("shared_with"))
      for (const auto& stage : shared->items()) weight.shared_with.push_back(stage.small());
    weights.push_back(std::move(weight));
  }
  return weights;
}

void read_model(const Field& model, Plan& plan) {
  auto& m = plan.model;
  m.path = model["path"].text();
  m.sha256 = model["sha256"].text();
  m.format = model["format"].text();
  m.params = model["params"].integer(0);
  if (auto bytes = model.find("param_bytes")) m.param_bytes = bytes->integer(0);
  m.evaluated_batch = model["evaluated_batch"].integer(1);
  m.inputs = read_tensors(model["inputs"]);
  auto fields = model["inputs"].items();
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    if (auto bound = fields[i].find("index_bound")) m.inputs[i].index_bound = bound->integer(1);
    if (m.inputs[i].batch_dim < 0)
      fields[i]["batch_dim"].fail("-1: input '" + text_excerpt(m.inputs[i].name) + "' has no batch dim");
  }
}

Link read_link(const Field& link) { return Link{link["bandwidth_gbps"].non_negative(), link["latency_us"].non_negative()}; }

std::optional<Link> read_link(const Field& cluster, const char* key) {
  auto field = cluster.find(key);
  if (!field) return std::nullopt;
  return read_link(*field);
}

std::optional<Host> read_host(const Field& cluster) {
  auto field = cluster.find("host");
  if (!field) return std::nullopt;
  return Host{(*field)["mem_bytes"].integer(0), read_link((*field)["link"]), (*field)["mem_bandwidth_gbps"].non_negative()};
}

// A mixed cluster's node groups: their nodes make the cluster's.
void read_node_groups(const Field& cluster, Cluster& c) {
  auto list = cluster.find("node_groups");
  if (!list) return;
  std::int64_t nodes = 0;
  for (const auto& field : list->items()) {
    NodeGroup group{field["nodes"].small(1), field["device"].text(), field["mem_bytes"].integer(1),
                    read_link(field["intra_node"]), read_host(field)};
    nodes += group.nodes;
    c.node_groups.push_back(group);
  }
  if (c.node_groups.size() < 2) list->fail("a mixed cluster has two node groups at least");
  if (nodes != c.nodes)
    list->fail("the groups' " + std::to_string(nodes) + " node(s) do not make the cluster's " + std::to_string(c.nodes));
  std::string names;
  std::int64_t least = c.node_groups.front().mem_bytes;
  for (const auto& group : c.node_groups) names += (names.empty() ? "" : "+") + group.device, least = std::min(least, group.mem_bytes);
  if (c.device != names) cluster["device"].fail(c.device + ": a mixed cluster's device names its groups' kinds, " + names);
  if (c.mem_bytes != least)
    cluster["mem_bytes"].fail(std::to_string(c.mem_bytes) + ": a mixed cluster's is its groups' least, " + std::to_string(least));
}

void read_cluster(const Field& cluster, Plan& plan) {
  auto& c = plan.cluster;
  c.gpus = cluster["gpus"].small(1);
  c.gpus_per_node = cluster["gpus_per_node"].small(1);
  c.nodes = cluster.has("nodes") ? cluster["nodes"].small(1) : (c.gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  c.mem_bytes = cluster["mem_bytes"].integer(1);
  c.device = cluster["device"].text();
  c.intra_node = read_link(cluster, "intra_node");
  c.inter_node = read_link(cluster, "inter_node");
  c.host = read_host(cluster);
  if (c.gpus % c.gpus_per_node != 0 || c.nodes * c.gpus_per_node != c.gpus) {
    cluster.fail(std::to_string(c.gpus) + " gpus do not make " + std::to_string(c.nodes) + " node(s) of " +
                 std::to_string(c.gpus_per_node));
  }
  read_node_groups(cluster, c);
}

void read_batch(const Field& batch, Plan& plan) {
  auto& b = plan.batch;
  b.global = batch["global"].integer(1);
  b.pipelines = batch["pipelines"].small(1);
  b.microbatches = batch["microbatches"].small(1);
  b.microbatch_size = batch["microbatch_size"].small(1);
  if (static_cast<std::int64_t>(b.pipelines) * b.microbatches * b.microbatch_size != b.global) {
    batch.fail("global " + std::to_string(b.global) + " is not pipelines x microbatches x microbatch_size (" +
               std::to_string(b.pipelines) + " x " + std::to_string(b.microbatches) + " x " +
               std::to_string(b.microbatch_size) + ")");
  }
}

// A named choice ("1f1b"), parsed with the option's own parser:
// "plan.json: schedule: zigzag: unknown schedule (known: 1f1b, gpipe)".
template <typename Choice>
Choice read_choice(const Field& field, Choice (*parse)(std::string_view, std::string_view)) {
  return parse(text_excerpt(field.text()), field.label() + ":");
}

// false (none), true (full) or a name (plan_json.h writes "selective" so).
Recompute read_recompute(const Field& field) {
  if (field.raw().is_boolean()) return field.flag() ? Recompute::kFull : Recompute::kNone;
  return read_choice(field, parse_recompute);
}

// Where a stage input comes from: a model input, or an output of an earlier stage whose name
// and dtype it carries.
void read_source(const Field& input, Tensor& tensor, int stage_id, const Plan& plan) {
  Field source = input["source"];
  if (source.has("model_input") + source.has("stage") + source.has("embedding") > 1)
    source.fail("names more than one of model_input, stage and embedding");
  if (source.has("embedding")) {
    tensor.embedding = source["embedding"].text();
    bool known = false;
    if (plan.sharding)
      for (const auto& table : plan.sharding->tables) known |= table.name == *tensor.embedding;
    if (!known) source["embedding"].fail("'" + text_excerpt(*tensor.embedding) + "' is not a table of the sharding section");
    return;
  }
  if (source.has("model_input")) {
    tensor.model_input = source["model_input"].text();
    bool known = false;
    for (const auto& model_input : plan.model.inputs) known |= model_input.name == *tensor.model_input;
    if (!known) source["model_input"].fail("'" + text_excerpt(*tensor.model_input) + "' is not one of model.inputs");
    return;
  }
  // Otherwise it comes from a stage: "source.stage: missing" if neither is there.
  tensor.from_stage = source["stage"].small(std::numeric_limits<int>::min());
  if (tensor.from_stage < 0 || tensor.from_stage >= stage_id)
    source["stage"].fail(std::to_string(tensor.from_stage) + " is not an earlier stage");
  const auto& sender = plan.stages[tensor.from_stage];
  tensor.from_output = source["output"].small(std::numeric_limits<int>::min());
  if (tensor.from_output < 0 || tensor.from_output >= static_cast<int>(sender.outputs.size())) {
    source["output"].fail(std::to_string(tensor.from_output) + " is not an output of stage " +
                          std::to_string(tensor.from_stage) + " (it has " + std::to_string(sender.outputs.size()) + ")");
  }
  const auto& sent = sender.outputs[tensor.from_output];
  // Shapes may differ in the batch dim only (the stages may have different replica counts).
  auto same_but_batch = [&] {
    if (sent.batch_dim != tensor.batch_dim || sent.shape.size() != tensor.shape.size()) return false;
    for (std::size_t d = 0; d < sent.shape.size(); ++d)
      if (static_cast<int>(d) != sent.batch_dim && sent.shape[d] != tensor.shape[d]) return false;
    return true;
  };
  if (sent.name != tensor.name || sent.dtype != tensor.dtype || !same_but_batch()) {
    input.fail("'" + text_excerpt(tensor.name) + "' " + tensor.dtype + " does not match output " + std::to_string(tensor.from_output) +
               " of stage " + std::to_string(tensor.from_stage) + ", '" + text_excerpt(sent.name) + "' " + sent.dtype +
               " (same name, dtype, batch dim and other dims expected)");
  }
}

std::string read_sha256(const Field& field) {
  std::string sha256 = field.text();
  bool hex = sha256.size() == 64 && sha256.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex) field.fail("'" + text_excerpt(sha256) + "' is not a SHA-256 (64 lowercase hex digits)");
  return sha256;
}

std::vector<int> read_op_ids(const Field& list) {
  std::vector<int> ops;
  for (const auto& op : list.items()) ops.push_back(op.small());
  return ops;
}

TensorParallel read_tensor_parallel(const Field& field, const Plan& plan, const std::vector<Weight>& params) {
  TensorParallel split;
  split.degree = field["degree"].small(1, kMaxParallelDegree);
  if (plan.cluster.gpus_per_node % split.degree != 0)
    field["degree"].fail(std::to_string(split.degree) + " does not divide the " + std::to_string(plan.cluster.gpus_per_node) +
                         " devices of a node (a group never spans nodes)");
  for (const auto& region : field["regions"].items()) {
    TensorParallel::Region entry;
    if (auto kind = region.find("kind")) entry.kind = read_choice(*kind, parse_region_kind);
    entry.column_ops = read_op_ids(region["column_ops"]);
    if (entry.column_ops.empty()) region["column_ops"].fail("no column ops: a split region starts with one");
    // The vocabulary head has no row op: its logits stay split for the cross entropy.
    if (entry.kind != RegionKind::kVocabularyHead) entry.row_op = region["row_op"].small();
    entry.ops = read_op_ids(region["ops"]);
    if (auto module = region.find("module")) entry.module = module->text();
    split.regions.push_back(std::move(entry));
  }
  if (auto ops = field.find("sequence_ops")) split.sequence_ops = read_op_ids(*ops);
  for (const auto& weight : field["weights"].items()) {
    TensorParallel::SplitWeight entry;
    entry.name = weight["name"].text();
    bool held = std::any_of(params.begin(), params.end(), [&](const Weight& w) { return w.name == entry.name; });
    if (!held) weight["name"].fail("'" + text_excerpt(entry.name) + "' is not a parameter of the stage");
    entry.dim = weight["dim"].small(0, 7);
    if (auto groups = weight.find("groups")) entry.groups = groups->small(1, 64);
    split.weights.push_back(std::move(entry));
  }
  for (const auto& left : field["unsplit"].items())
    split.unsplit.push_back({read_op_ids(left["column_ops"]), left["reason"].text()});
  if (auto files = field.find("files")) {
    for (const auto& entry : files->items()) {
      PlanFile file{entry["file"].text(), ""};
      if (file.file.empty()) entry["file"].fail("empty");
      if (auto sha256 = entry.find("sha256")) file.sha256 = read_sha256(*sha256);
      split.files.push_back(std::move(file));
    }
    if (split.files.size() != static_cast<std::size_t>(split.degree))
      files->fail(std::to_string(split.files.size()) + " files for degree " + std::to_string(split.degree) +
                  " (one per tensor rank)");
  }
  return split;
}

void read_stage_ranks(const Field& field, Stage& stage, const Plan& plan) {
  for (const auto& rank : field["ranks"].items()) stage.ranks.push_back(rank.small(0));
  stage.replicas_per_pipeline = field["replicas_per_pipeline"].small(1);
  if (auto shares = field.find("replica_samples")) {
    for (const auto& samples : shares->items()) stage.replica_samples.push_back(samples.small(1));
    std::int64_t sum = 0;
    for (int samples : stage.replica_samples) sum += samples;
    if (static_cast<int>(stage.replica_samples.size()) != stage.replicas_per_pipeline || sum != plan.batch.microbatch_size)
      shares->fail(json_excerpt(shares->raw()) + ": not one sample count per replica of a pipeline (" +
                   std::to_string(stage.replicas_per_pipeline) + ") adding up to the microbatch size " +
                   std::to_string(plan.batch.microbatch_size));
  } else if (plan.batch.microbatch_size % stage.replicas_per_pipeline != 0) {
    field["replicas_per_pipeline"].fail(std::to_string(stage.replicas_per_pipeline) + " does not divide the microbatch size " +
                                        std::to_string(plan.batch.microbatch_size));
  }
  std::size_t expected = static_cast<std::size_t>(stage.replicas_per_pipeline) * plan.batch.pipelines;
  const auto degree = static_cast<std::size_t>(stage.group_devices());
  if (stage.ranks.size() != expected * degree) {
    field["ranks"].fail(std::to_string(stage.ranks.size()) + " rank(s), expected replicas_per_pipeline x pipelines" +
                        (stage.tensor_parallel.degree > 1 ? " x tensor_parallel.degree" : "") +
                        (stage.context_degree > 1 ? " x context_parallel.degree" : "") + " = " +
                        std::to_string(expected * degree));
  }
  if (auto replicas = field.find("replicas"); replicas && replicas->integer() != static_cast<std::int64_t>(expected))
    replicas->fail(json_excerpt(replicas->raw()) + " differs from the " + std::to_string(expected) + " ranks of the stage");
}

MemoryBreakdown read_memory(const Field& memory) {
  MemoryBreakdown m;
  m.weights = memory["weights"].non_negative();
  m.grads = memory["grads"].non_negative();
  m.optimizer = memory["optimizer"].non_negative();
  m.activations = memory["activations"].non_negative();
  m.workspace = memory["workspace"].non_negative();
  m.comm_buffers = memory["comm_buffers"].non_negative();
  // Absent from plans written before the step's buffers were told apart from the passes'.
  if (auto step = memory.find("step_buffers")) m.step_buffers = step->non_negative();
  if (auto total = memory.find("total")) total->non_negative();  // derived from the others; only checked
  return m;
}

StagePrediction read_predicted(const Field& predicted) {
  StagePrediction p;
  p.fwd_ms = predicted["fwd_ms"].non_negative();
  p.bwd_ms = predicted["bwd_ms"].non_negative();
  p.mem_bytes = predicted["mem_bytes"].non_negative();
  if (auto p2p = predicted.find("p2p_ms")) p.p2p_ms = p2p->non_negative();
  if (auto allreduce = predicted.find("allreduce_ms")) p.allreduce_ms = allreduce->non_negative();
  if (auto offload = predicted.find("offload_ms")) p.offload_ms = offload->non_negative();
  if (auto host = predicted.find("host_mem_bytes")) p.host_mem_bytes = host->non_negative();
  if (auto limit = predicted.find("mem_limit_bytes")) p.mem_limit_bytes = limit->integer(1);
  if (auto in_flight = predicted.find("in_flight")) p.in_flight = in_flight->small();
  if (auto memory = predicted.find("memory")) p.memory = read_memory(*memory);
  return p;
}

Stage read_stage(const Field& field, int index, const Plan& plan) {
  Stage stage;
  stage.id = field["id"].small(std::numeric_limits<int>::min());
  if (stage.id != index) field["id"].fail(std::to_string(stage.id) + ", expected " + std::to_string(index) + " (stage ids run 0, 1, ... in order)");
  stage.file = field["file"].text();
  if (stage.file.empty()) field["file"].fail("empty");
  if (auto sha256 = field.find("sha256")) stage.sha256 = read_sha256(*sha256);
  stage.params = read_weights(field["params"]);
  if (auto split = field.find("tensor_parallel")) stage.tensor_parallel = read_tensor_parallel(*split, plan, stage.params);
  if (auto context = field.find("context_parallel")) {
    stage.context_degree = (*context)["degree"].small(2, kMaxParallelDegree);
    const int per_node = plan.cluster.gpus_per_node;
    if (per_node % stage.group_devices() != 0 && stage.group_devices() % per_node != 0)
      (*context)["degree"].fail(std::to_string(stage.context_degree) + " x tensor_parallel.degree " +
                                std::to_string(stage.tensor_parallel.degree) + " neither divides the " +
                                std::to_string(per_node) + " devices of a node nor is a whole number of nodes");
  }
  read_stage_ranks(field, stage, plan);
  stage.outputs = read_tensors(field["outputs"]);
  auto outputs = field["outputs"].items();
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (auto flag = outputs[i].find("model_output")) stage.outputs[i].model_output = flag->flag();
  auto inputs = field["inputs"].items();
  for (const auto& input : inputs) {
    stage.inputs.push_back(read_tensor(input));
    read_source(input, stage.inputs.back(), index, plan);
  }
  stage.buffers = read_weights(field["buffers"]);
  stage.recompute = read_recompute(field["recompute"]);
  stage.offload = field["offload"].flag();
  if (auto sharding = field.find("state_sharding")) stage.state_sharding = read_choice(*sharding, parse_state_sharding);
  stage.predicted = read_predicted(field["predicted"]);
  if (auto ops = field.find("ops"))
    for (const auto& op : ops->items()) stage.ops.push_back(op.small());
  if (auto range = field.find("op_range")) stage.op_range = range->text();
  if (auto modules = field.find("modules")) {
    for (const auto& module : modules->items()) {
      stage.modules.push_back(module.text());
      if (stage.modules.back().empty()) module.fail("empty");
    }
  }
  if (auto blocks = field.find("blocks")) {
    auto pair = blocks->items();
    if (pair.size() != 2) blocks->fail("expected [begin, end]");
    stage.blocks = {pair[0].small(), pair[1].small()};
  }
  return stage;
}

// Model chunks per rank (plan.h): absent, 1; more only under 1F1B. 64 bounds what a hostile
// plan may ask for, as kMaxParallelDegree does.
constexpr int kMaxInterleave = 64;

void read_interleave(const Field& root, Plan& plan) {
  auto field = root.find("interleave");
  if (!field) return;
  plan.interleave = field->small(1, kMaxInterleave);
  if (plan.interleave > 1 && plan.schedule != Schedule::k1F1B)
    field->fail(std::to_string(plan.interleave) + " model chunks per rank need the 1f1b schedule, not " +
                std::string(schedule_name(plan.schedule)));
}

// An interleaved plan's stages are p x interleave chunks, stage s on the devices of stage s mod p:
// the same ranks in the same tensor-parallel groups; its microbatches come in rounds of p.
void check_interleaved_stages(const Field& root, const Plan& plan) {
  if (plan.interleave == 1) return;
  const int count = plan.stage_count(), groups = count / plan.interleave;
  if (count % plan.interleave != 0)
    root["interleave"].fail(std::to_string(plan.interleave) + " does not divide the " + std::to_string(count) + " stages");
  if (plan.batch.microbatches % groups != 0)  // the schedule runs them in rounds of one per group (plan/schedule.h)
    root["interleave"].fail(std::to_string(plan.interleave) + " model chunks per rank need the " +
                            std::to_string(plan.batch.microbatches) + " microbatches to be a multiple of the " +
                            std::to_string(groups) + " pipeline stages");
  auto fields = root["stages"].items();
  for (int s = groups; s < count; ++s) {
    const auto &stage = plan.stages[s], &first = plan.stages[s % groups];
    std::string why = " (interleave " + std::to_string(plan.interleave) + ": stage s runs on the devices of stage s mod " +
                      std::to_string(groups) + ")";
    std::string other = "stage " + std::to_string(first.id) + "'s ";
    if (stage.ranks != first.ranks)
      fields[s]["ranks"].fail(json_excerpt(fields[s]["ranks"].raw()) + " differ from " + other +
                              json_excerpt(json(first.ranks)) + why);
    if (stage.tensor_parallel.degree != first.tensor_parallel.degree)
      fields[s].fail("tensor_parallel.degree " + std::to_string(stage.tensor_parallel.degree) + " differs from " + other +
                     std::to_string(first.tensor_parallel.degree) + why);
    if (stage.context_degree != first.context_degree)
      fields[s].fail("context_parallel.degree " + std::to_string(stage.context_degree) + " differs from " + other +
                     std::to_string(first.context_degree) + why);
  }
}

// Ranks 0..R-1, each once, each where its stage says it is; with the unused devices they make
// up the cluster. In an interleaved plan a rank is placed by its device group's first stage, and
// the later chunks of the group run on the same ranks (check_interleaved_stages).
void read_ranks(const Field& list, Plan& plan) {
  auto fields = list.items();
  const int count = static_cast<int>(fields.size());
  const int groups = plan.pipeline_stages();
  std::size_t staged = 0;
  for (int s = 0; s < groups; ++s) staged += plan.stages[s].ranks.size();
  if (staged != fields.size())
    list.fail(std::to_string(count) + " rank(s), but the stages place " + std::to_string(staged));
  std::vector<bool> seen(fields.size(), false);
  const int per_node = plan.cluster.gpus_per_node;
  for (const auto& field : fields) {
    RankPlacement rank;
    rank.rank = field["rank"].small(0);
    if (rank.rank >= count) field["rank"].fail(std::to_string(rank.rank) + " is not in 0.." + std::to_string(count - 1));
    if (seen[rank.rank]) field["rank"].fail(std::to_string(rank.rank) + " appears twice");
    seen[rank.rank] = true;
    rank.node = field["node"].small(0);
    rank.local_rank = field["local_rank"].small(0);
    rank.stage = field["stage"].small(0);
    rank.replica = field["replica"].small(0);
    if (auto tensor_rank = field.find("tensor_rank")) rank.tensor_rank = tensor_rank->small(0, kMaxParallelDegree - 1);
    if (auto context_rank = field.find("context_rank")) rank.context_rank = context_rank->small(0, kMaxParallelDegree - 1);
    if (auto device = field.find("device")) rank.device = device->text();
    if (rank.stage >= groups)
      field["stage"].fail(std::to_string(rank.stage) + " is not a stage" +
                          (plan.interleave > 1 ? " that starts a device group (interleave " + std::to_string(plan.interleave) +
                                                     ": stages 0.." + std::to_string(groups - 1) + ")"
                                               : std::string()));
    const auto& ranks = plan.stages[rank.stage].ranks;
    if (rank.replica >= static_cast<int>(ranks.size()) || ranks[rank.replica] != rank.rank) {
      field.fail("rank " + std::to_string(rank.rank) + " as replica " + std::to_string(rank.replica) + " of stage " +
                 std::to_string(rank.stage) + " disagrees with stages[" + std::to_string(rank.stage) + "].ranks");
    }
    int degree = plan.stages[rank.stage].tensor_parallel.degree;
    if (rank.tensor_rank != rank.replica % degree)
      field.fail("rank " + std::to_string(rank.rank) + " has tensor rank " + std::to_string(rank.tensor_rank) +
                 ", but its place " + std::to_string(rank.replica) + " in a stage of groups of " + std::to_string(degree) +
                 " makes it " + std::to_string(rank.replica % degree));
    const int contexts = plan.stages[rank.stage].context_degree;
    if (rank.context_rank != rank.replica / degree % contexts)
      field.fail("rank " + std::to_string(rank.rank) + " has context rank " + std::to_string(rank.context_rank) +
                 ", but its place " + std::to_string(rank.replica) + " in a stage of context groups of " +
                 std::to_string(contexts) + " x " + std::to_string(degree) + " makes it " +
                 std::to_string(rank.replica / degree % contexts));
    if (rank.node != rank.rank / per_node || rank.local_rank != rank.rank % per_node) {
      field.fail("rank " + std::to_string(rank.rank) + " is local rank " + std::to_string(rank.rank % per_node) +
                 " of node " + std::to_string(rank.rank / per_node) + " with " + std::to_string(per_node) +
                 " devices per node, not " + std::to_string(rank.local_rank) + " of " + std::to_string(rank.node));
    }
    const NodeGroup* group = plan.cluster.group_of_rank(rank.rank);
    if (rank.device != (group ? group->device : std::string()))
      field.fail("rank " + std::to_string(rank.rank) + " is a " + (group ? group->device : plan.cluster.device) +
                 (rank.device.empty() ? ", but its device is not given" : ", not a " + rank.device));
    plan.ranks.push_back(rank);
  }
}

void read_unused(const Field& document, Plan& plan) {
  if (auto unused = document.find("unused_devices")) {
    int count = (*unused)["count"].small(0);
    for (const auto& rank : (*unused)["ranks"].items()) plan.unused.ranks.push_back(rank.small(0, plan.cluster.gpus - 1));
    if (static_cast<int>(plan.unused.ranks.size()) != count)
      (*unused)["ranks"].fail(std::to_string(plan.unused.ranks.size()) + " listed, but count is " + std::to_string(count));
    plan.unused.reason = (*unused)["reason"].text();
  }
  int used = static_cast<int>(plan.ranks.size());
  if (used + static_cast<int>(plan.unused.ranks.size()) != plan.cluster.gpus) {
    document["ranks"].fail(std::to_string(used) + " rank(s) and " + std::to_string(plan.unused.ranks.size()) +
                           " unused device(s) do not make the cluster's " + std::to_string(plan.cluster.gpus));
  }
}

void read_plan_predicted(const Field& predicted, Plan& plan) {
  auto& p = plan.predicted;
  p.iteration_ms = predicted["iteration_ms"].non_negative();
  p.samples_per_s = predicted["samples_per_s"].non_negative();
  p.bubble_fraction = predicted["bubble_fraction"].non_negative();
  p.lower_bound_ms = predicted["lower_bound_ms"].non_negative();
  p.peak_mem_bytes = predicted["peak_mem_bytes"].non_negative();
  p.efficiency = p.iteration_ms > 0 ? p.lower_bound_ms / p.iteration_ms : 0;
  if (auto efficiency = predicted.find("efficiency")) p.efficiency = efficiency->non_negative();
  // Added to version 1 later: absent from older plans.
  if (auto bound = predicted.find("flop_bound_ms")) p.flop_bound_ms = bound->non_negative();
  if (auto tflops = predicted.find("model_tflops_per_device")) p.model_tflops_per_device = tflops->non_negative();
  if (auto fraction = predicted.find("peak_fraction")) p.peak_fraction = fraction->non_negative();
}

}  // namespace

std::string Plan::folder() const {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

namespace {

std::string from_plan_folder(const Plan& plan, const std::string& path) {
  std::filesystem::path file(path);
  return file.is_absolute() ? file.string() : (std::filesystem::path(plan.folder()) / file).string();
}

}  // namespace

std::string Plan::stage_path(const Stage& stage) const { return from_plan_folder(*this, stage.file); }

std::string Plan::stage_path(const Stage& stage, int tensor_rank) const {
  const auto& files = stage.tensor_parallel.files;
  if (files.empty()) return stage_path(stage);
  return from_plan_folder(*this, files.at(static_cast<std::size_t>(tensor_rank)).file);
}

std::string Plan::model_file() const { return from_plan_folder(*this, model.path); }

namespace {

// Each shard lies inside its table on a rank of the cluster, one shard of a table per rank. A
// data-parallel table is whole on every rank; a table-wise one whole on one; the others are cut
// in rows only (row-wise, table-row-wise) or in columns only (column-wise) into pieces that tile
// the table from 0 to its end, each element once: checked in O(n log n) on the pieces' ranges.
void check_cover(const Field& field, const ShardedTable& table, const Plan& plan) {
  const auto world = static_cast<std::size_t>(plan.cluster.gpus);
  if (table.shards.size() > world) field["shards"].fail(std::to_string(table.shards.size()) + " shards, more than the ranks");
  std::vector<bool> on_rank(world, false);
  for (const auto& s : table.shards) {
    if (s.rank >= plan.cluster.gpus) field["shards"].fail("rank " + std::to_string(s.rank) + " is not a rank of the cluster");
    if (on_rank[static_cast<std::size_t>(s.rank)]) field["shards"].fail("two shards on rank " + std::to_string(s.rank));
    on_rank[static_cast<std::size_t>(s.rank)] = true;
  }
  auto whole = [&](const EmbeddingShard& s) { return s.rows == table.rows && s.cols == table.dim; };
  bool all_whole = std::all_of(table.shards.begin(), table.shards.end(), whole);
  if (table.type == "data_parallel" || table.type == "table_wise") {
    std::size_t expected = table.type == "data_parallel" ? world : 1;
    if (!all_whole || table.shards.size() != expected)
      field["shards"].fail("a " + table.type + " table is whole on " + (expected == 1 ? "one rank" : "every rank"));
    return;
  }
  bool by_columns = table.type == "column_wise";
  // (begin, length) of each piece along the cut dim; the other dim must be whole.
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  for (const auto& s : table.shards) {
    bool other_whole = by_columns ? s.rows == table.rows : s.cols == table.dim;
    if (!other_whole) field["shards"].fail("a " + table.type + " table is cut in " + (by_columns ? "columns" : "rows") + " only");
    pieces.emplace_back(by_columns ? s.col_begin : s.row_begin, by_columns ? s.cols : s.rows);
  }
  std::sort(pieces.begin(), pieces.end());
  std::int64_t next = 0;
  for (const auto& [begin, length] : pieces) {
    if (begin != next) field["shards"].fail(begin < next ? "shards overlap" : "the shards do not cover the table exactly once");
    next = begin + length;
  }
  if (next != (by_columns ? table.dim : table.rows))
    field["shards"].fail("the shards do not cover the table's " + std::to_string(table.rows) + " x " + std::to_string(table.dim) +
                         " elements exactly once");
}

// A string that must be one of `names`.
std::string read_name(const Field& field, std::initializer_list<const char*> names, const char* what) {
  std::string text = field.text();
  std::string known;
  for (const char* name : names) {
    if (text == name) return text;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  field.fail("'" + text_excerpt(text) + "' is not " + what + " (" + known + ")");
}

constexpr std::initializer_list<const char*> kCommDtypes = {"fp32", "fp16", "bf16"};

ShardLoad read_shard_load(const Field& field) {
  return {field["lookup_ms"].non_negative(), field["all_to_all_ms"].non_negative(), field["allreduce_ms"].non_negative(),
          field["mem_bytes"].non_negative(), field["host_mem_bytes"].non_negative()};
}

std::pair<std::int64_t, std::int64_t> read_range(const Field& field, std::int64_t limit) {
  auto pair = field.items();
  if (pair.size() != 2) field.fail("expected [begin, end)");
  auto begin = pair[0].integer(0, limit), end = pair[1].integer(0, limit);
  if (end <= begin) field.fail("empty range [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  return {begin, end - begin};
}

ShardedTable read_sharded_table(const Field& field, const Plan& plan) {
  ShardedTable table;
  table.name = field["name"].text();
  if (auto stage_name = field.find("stage_name")) table.stage_name = stage_name->text();
  if (auto args = field.find("lookup_args"))
    for (const auto& arg : args->items()) table.lookup_args.push_back(arg.small(0));
  table.rows = field["rows"].integer(1);
  table.dim = field["dim"].integer(1);
  table.dtype = field["dtype"].text();
  auto dtype = ir::parse_dtype(table.dtype);
  if (!dtype || ir::dtype_name(*dtype) != table.dtype) field["dtype"].fail("'" + text_excerpt(table.dtype) + "' is not a dtype");
  table.pooling_mode = read_name(field["pooling_mode"], {"sum", "mean", "max", "none"}, "a pooling mode");
  // Recorded per table for readers of one table; the section's are the ones that count.
  read_name(field["comm_dtype"], kCommDtypes, "a communication dtype");
  read_name(field["comm_dtype_bwd"], kCommDtypes, "a communication dtype");
  table.pooling = field["pooling"].non_negative();
  for (const auto& input : field["indexed_by"].items()) table.indexed_by.push_back(input.text());
  table.type = read_name(field["type"], {"data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise"},
                         "a sharding type");
  table.tier = read_name(field["tier"], {"device", "host"}, "a tier");
  if (table.tier == "host" && table.type != "table_wise" && table.type != "row_wise" && table.type != "table_row_wise")
    field["tier"].fail("host: only a table_wise, row_wise or table_row_wise table lives in host memory");
  // Absent from plans written before caches were sized per table.
  if (auto cache = field.find("cache_fraction"); cache && table.tier == "host") {
    table.cache_fraction = cache->non_negative();
    if (table.cache_fraction > 1) cache->fail("more than the whole shard");
  }
  if (auto hits = field.find("hit_rate"); hits && table.tier == "host") {
    table.hit_rate = hits->non_negative();
    if (table.hit_rate > 1) hits->fail("more than every lookup");
  }
  for (const auto& entry : field["shards"].items()) {
    EmbeddingShard shard;
    shard.rank = entry["rank"].small(0);
    std::tie(shard.row_begin, shard.rows) = read_range(entry["rows"], table.rows);
    std::tie(shard.col_begin, shard.cols) = read_range(entry["cols"], table.dim);
    table.shards.push_back(shard);
  }
  if (table.shards.empty()) field["shards"].fail("no shards");
  check_cover(field, table, plan);
  table.per_rank = read_shard_load(field["predicted_per_rank"]);
  return table;
}

PlanFile read_plan_file_entry(const Field& field) {
  PlanFile file{field["file"].text(), read_sha256(field["sha256"])};
  if (file.file.empty()) field["file"].fail("empty");
  return file;
}

// The files of a sharded plan: every table named in the tables file, one shard file per rank,
// index inputs that are model inputs.
ShardingFiles read_sharding_files(const Field& field, const Plan& plan, const Sharding& sharding) {
  ShardingFiles files;
  files.indices = read_plan_file_entry(field["indices"]);
  for (const auto& input : field["indices"]["inputs"].items()) {
    files.index_inputs.push_back(input.text());
    bool known = false;
    for (const auto& model_input : plan.model.inputs) known |= model_input.name == files.index_inputs.back();
    if (!known) input.fail("'" + text_excerpt(files.index_inputs.back()) + "' is not one of model.inputs");
  }
  files.tables = read_plan_file_entry(field["tables"]);
  auto shards = field["shards"].items();
  if (shards.size() != static_cast<std::size_t>(plan.cluster.gpus))
    field["shards"].fail(std::to_string(shards.size()) + " shard file(s), the cluster has " + std::to_string(plan.cluster.gpus) + " ranks");
  for (std::size_t r = 0; r < shards.size(); ++r) {
    if (shards[r]["rank"].small(0) != static_cast<int>(r)) shards[r]["rank"].fail("expected " + std::to_string(r));
    files.shards.push_back(read_plan_file_entry(shards[r]));
  }
  for (const auto& table : sharding.tables)
    if (table.stage_name.empty() || table.lookup_args.empty())
      field.fail("table " + text_excerpt(table.name) + " has no stage_name or lookup_args in the tables file");
  return files;
}

void read_sharding(const Field& root, Plan& plan) {
  auto field = root.find("sharding");
  if (!field) return;
  Sharding sharding;
  sharding.batch_per_rank = (*field)["batch_per_rank"].small(1);
  if (sharding.batch_per_rank * plan.cluster.gpus != plan.batch.global)
    (*field)["batch_per_rank"].fail(std::to_string(sharding.batch_per_rank) + " x " + std::to_string(plan.cluster.gpus) +
                                    " ranks is not the global batch " + std::to_string(plan.batch.global));
  sharding.comm_dtype = read_name((*field)["comm_dtype"], kCommDtypes, "a communication dtype");
  sharding.comm_dtype_bwd = read_name((*field)["comm_dtype_bwd"], kCommDtypes, "a communication dtype");
  sharding.sparse_optimizer =
      read_name((*field)["sparse_optimizer"], {"sgd", "momentum", "adam", "rowwise_adagrad"}, "a sparse optimizer");
  auto ranks = (*field)["ranks"].items();
  if (ranks.size() != static_cast<std::size_t>(plan.cluster.gpus))
    (*field)["ranks"].fail(std::to_string(ranks.size()) + " rank(s), the cluster has " + std::to_string(plan.cluster.gpus));
  std::set<std::string> names;
  for (const auto& table : (*field)["tables"].items()) {
    sharding.tables.push_back(read_sharded_table(table, plan));
    if (!names.insert(sharding.tables.back().name).second) table["name"].fail("a second table of this name");
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = ranks[i];
    ShardedRank rank{r["rank"].small(0), r["lookup_ms"].non_negative(), r["all_to_all_ms"].non_negative(),
                     r["allreduce_ms"].non_negative(), r["dense_ms"].non_negative(), r["step_ms"].non_negative(),
                     r["mem_bytes"].non_negative(), r["host_mem_bytes"].non_negative()};
    if (rank.rank != static_cast<int>(i)) r["rank"].fail(std::to_string(rank.rank) + ", expected " + std::to_string(i));
    sharding.ranks.push_back(rank);
  }
  if (auto files = field->find("files")) sharding.files = read_sharding_files(*files, plan, sharding);
  plan.sharding = std::move(sharding);
}

// A tied weight names the other stages that hold it: they must exist.
void check_shared_weights(const Field& stages, const Plan& plan) {
  for (const auto& stage : plan.stages)
    for (const auto& weight : stage.params)
      for (int other : weight.shared_with)
        if (other < 0 || other >= static_cast<int>(plan.stages.size()) || other == stage.id) {
          stages.fail("stage " + std::to_string(stage.id) + " shares " + weight.name + " with stage " + std::to_string(other) +
                      ", which is not another stage of the plan");
        }
}

}  // namespace

Plan from_json(const nlohmann::json& document, const std::string& path) {
  Plan plan;
  plan.path = path;
  Field root(document, "", plan.path);
  check_header(root);
  read_model(root["model"], plan);
  read_cluster(root["cluster"], plan);
  read_batch(root["batch"], plan);
  plan.schedule = read_choice(root["schedule"], parse_schedule);
  read_interleave(root, plan);
  plan.optimizer = read_choice(root["optimizer"], parse_optimizer);
  if (auto precision = root.find("precision")) plan.precision = read_choice(*precision, parse_precision);
  if (auto attention = root.find("attention")) plan.attention = read_choice(*attention, parse_fusion);
  if (auto elementwise = root.find("elementwise")) plan.elementwise = read_choice(*elementwise, parse_fusion);
  read_sharding(root, plan);
  if (auto generator = root.find("generator"))
    plan.generator = Generator{(*generator)["tool"].text(), (*generator)["version"].text(), (*generator)["command"].text()};
  auto stages = root["stages"].items();
  if (stages.empty()) root["stages"].fail("no stages");
  for (std::size_t i = 0; i < stages.size(); ++i) plan.stages.push_back(read_stage(stages[i], static_cast<int>(i), plan));
  check_shared_weights(root["stages"], plan);
  check_interleaved_stages(root, plan);
  read_ranks(root["ranks"], plan);
  read_unused(root, plan);
  read_plan_predicted(root["predicted"], plan);
  return plan;
}

Plan read_plan_file(const std::string& path) { return from_json(parse_document(path), path); }

std::string check_plan_file(const Plan& plan, const PlanFile& file, const std::string& what, bool check_sha256) {
  std::string path = from_plan_folder(plan, file.file);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(plan.path + ": " + what + " " + path + " is missing (write the stage files with the partition verb)");
  if (!check_sha256 || file.sha256.empty()) return path;
  std::string found = sha256_of_file(path);
  if (found != file.sha256) {
    throw InputError(path + " does not match " + plan.path + " (sha256 " + found.substr(0, 16) + "..., the plan says " +
                     file.sha256.substr(0, 16) + "...); re-run partition");
  }
  return path;
}

void check_stage_file(const Plan& plan, const Stage& stage, bool check_sha256) {
  check_plan_file(plan, {stage.file, stage.sha256}, "stage " + std::to_string(stage.id) + "'s file", check_sha256);
  const auto& files = stage.tensor_parallel.files;
  for (std::size_t rank = 0; rank < files.size(); ++rank)
    check_plan_file(plan, files[rank],
                    "stage " + std::to_string(stage.id) + "'s file of tensor rank " + std::to_string(rank), check_sha256);
}

void check_stage_files(const Plan& plan) {
  for (const auto& stage : plan.stages) check_stage_file(plan, stage, /*check_sha256=*/false);
  for (const auto& stage : plan.stages) check_stage_file(plan, stage);
}

}  // namespace rannc::plan
