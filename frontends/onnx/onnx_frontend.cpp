#include "frontends/onnx/onnx_frontend.h"

#include <google/protobuf/stubs/logging.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "frontends/onnx/onnx_opsets.h"
#include "frontends/onnx/onnx_shape_arithmetic.h"
#include "ir/batch_dims.h"
#include "ir/module_path.h"
#include "support/error.h"
#include "support/input_file.h"

namespace rannc {
namespace {

using onnx::TensorProto;

// Int tensors up to this size (shape vectors, axes) keep their values: shape inference needs
// them to follow Reshape/Expand targets, and the IR records them as literals.
constexpr int kSmallTensor = 64;

ir::DType to_dtype(int elem_type) { return ir::dtype_from_onnx(elem_type).value_or(ir::DType::kUnknown); }

std::string op_kind(const onnx::NodeProto& node) {
  bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
  return (default_domain ? std::string("onnx") : node.domain()) + "::" + node.op_type();
}

// Names come from the file: quoted short, control characters escaped, so the error stays one line.
std::string quoted(const std::string& name) { return "'" + text_excerpt(name) + "'"; }

std::string node_label(const onnx::NodeProto& node, int index) {
  return node.name().empty() ? "#" + std::to_string(index) : quoted(node.name());
}

std::shared_ptr<onnx::ModelProto> parse_model(const std::string& path) {
  auto proto = std::make_shared<onnx::ModelProto>();
  std::ifstream in(path, std::ios::binary);
  if (!proto->ParseFromIstream(&in)) {
    throw InputError(path + ": not an ONNX model (the protobuf does not parse), nor a zip archive (TorchScript, "
                            "torch.export .pt2)");
  }
  if (!proto->has_graph() || proto->graph().node_size() == 0) throw InputError(path + ": not an ONNX model (no graph)");
  return proto;
}

std::vector<std::int64_t> dims_of(const TensorProto& tensor) { return {tensor.dims().begin(), tensor.dims().end()}; }

std::string canonical_domain(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }

// The version of the default (ai.onnx) opset the model imports; 0 when it imports none.
int default_opset(const onnx::ModelProto& proto) {
  for (const auto& import : proto.opset_import()) {
    if (canonical_domain(import.domain()).empty()) return static_cast<int>(import.version());
  }
  return 0;
}

// The newest default opset the linked ONNX library is left to check and infer: opset 17 on
// every build. ONNX 1.17 knows opsets up to 22, but its inference leaves some of their outputs
// untyped or their dims unknown (GroupNormalization-18 and -21, what PyTorch 2.6 exports of a
// Llama-style decoder at opsets 18 and 20) and its checker refuses graph outputs without a
// shape; the rules of onnx_opsets.h read those opsets alike on ONNX 1.12 and 1.17, so a model
// plans the same whichever library the build links.
int library_opset() {
  const auto& map = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto it = map.find("");
  return it == map.end() ? onnx_opsets::kLibraryOpset : std::min(it->second.second, onnx_opsets::kLibraryOpset);
}

// Whether the linked library's checker and shape inference are left the model's opset and IR
// version. A newer model is checked and inferred here instead (onnx_opsets.h).
bool library_reads(const onnx::ModelProto& proto) {
  return proto.ir_version() <= std::min<std::int64_t>(onnx::IR_VERSION, onnx_opsets::kLibraryIrVersion) &&
         default_opset(proto) <= library_opset();
}

// The op schema the library has for a default-domain op at `opset` (its newest version at or
// below it), or nullptr.
const onnx::OpSchema* library_schema(const std::string& op, int opset) {
  return onnx::OpSchemaRegistry::Schema(op, std::min(opset, library_opset()), "");
}

// Whether an op type of the default domain exists at `opset`, in the library or in the table of
// newer forms.
bool known_op(const std::string& op, int opset) {
  return library_schema(op, opset) != nullptr || onnx_opsets::op_form(op, opset) != nullptr;
}

// Opsets and IR versions beyond what this frontend reads are refused whatever the library knows:
// the stage writer maps ops as opsets up to 23 define them.
void check_versions(const std::string& path, const onnx::ModelProto& proto) {
  if (proto.ir_version() > onnx_opsets::kMaxIrVersion) {
    throw InputError(path + ": ONNX IR version " + std::to_string(proto.ir_version()) +
                     " is newer than this build reads (up to " + std::to_string(onnx_opsets::kMaxIrVersion) + ")");
  }
  int opset = default_opset(proto);
  if (opset > onnx_opsets::kMaxOpset) {
    throw InputError(path + ": ONNX opset " + std::to_string(opset) + " is newer than this build reads (up to " +
                     std::to_string(onnx_opsets::kMaxOpset) + ")");
  }
}

// Rejects ops outside the ONNX standard (custom domains, unknown op types) with a message that
// names them; the checker would reject them too, but less clearly.
void check_ops_known(const std::string& path, const onnx::ModelProto& proto) {
  std::map<std::string, int> opsets;
  for (const auto& import : proto.opset_import()) {
    opsets[canonical_domain(import.domain())] = static_cast<int>(import.version());
  }
  std::set<std::pair<std::string, std::string>> functions;  // model-local functions are ops too
  for (const auto& function : proto.functions()) functions.insert({canonical_domain(function.domain()), function.name()});
  const auto& nodes = proto.graph().node();
  for (int i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    std::string domain = canonical_domain(node.domain());
    auto opset = opsets.find(domain);
    if (functions.count({domain, node.op_type()})) continue;
    bool known = opset != opsets.end() &&
                 (domain.empty() ? known_op(node.op_type(), opset->second)
                                 : onnx::OpSchemaRegistry::Schema(node.op_type(), opset->second, domain) != nullptr);
    if (!known) {
      throw InputError(path + ": unsupported op " + quoted(op_kind(node)) + " (node " + node_label(node, i) + ")");
    }
  }
}

// Every graph of the model: the main graph, model-local function bodies aside, and the subgraphs
// of If/Loop/Scan at any depth. Walked with an explicit stack: the depth of nesting is the
// file's to choose, never our call stack's.
template <typename Visit>
void for_each_graph(const onnx::GraphProto& graph, Visit visit) {
  std::vector<const onnx::GraphProto*> pending = {&graph};
  while (!pending.empty()) {
    const auto* current = pending.back();
    pending.pop_back();
    visit(*current);
    for (const auto& node : current->node()) {
      for (const auto& attr : node.attribute()) {
        if (attr.has_g()) pending.push_back(&attr.g());
        for (const auto& sub : attr.graphs()) pending.push_back(&sub);
      }
    }
  }
}

template <typename Visit>
void for_each_node(const onnx::GraphProto& graph, Visit visit) {
  for_each_graph(graph, [&](const onnx::GraphProto& current) {
    for (const auto& node : current.node()) visit(node);
  });
}

// Model-local functions that call themselves, directly or through others, would send ONNX shape
// inference (which expands calls) into endless recursion: refused, naming the cycle.
void check_functions_acyclic(const std::string& path, const onnx::ModelProto& proto) {
  using Key = std::pair<std::string, std::string>;  // domain, name
  std::map<Key, const onnx::FunctionProto*> functions;
  for (const auto& function : proto.functions()) functions[{canonical_domain(function.domain()), function.name()}] = &function;
  auto label = [](const Key& key) { return (key.first.empty() ? std::string() : key.first + "::") + key.second; };
  std::map<Key, std::vector<Key>> callees;
  for (const auto& [key, function] : functions) {
    auto& calls = callees[key];
    for (const auto& node : function->node()) {
      Key callee{canonical_domain(node.domain()), node.op_type()};
      if (functions.count(callee)) calls.push_back(callee);
      for (const auto& attr : node.attribute()) {
        auto add = [&](const onnx::NodeProto& inner) {
          Key nested{canonical_domain(inner.domain()), inner.op_type()};
          if (functions.count(nested)) calls.push_back(nested);
        };
        if (attr.has_g()) for_each_node(attr.g(), add);
        for (const auto& sub : attr.graphs()) for_each_node(sub, add);
      }
    }
  }
  // Depth-first search with an explicit stack; a callee still on the path closes a cycle.
  enum State { kUnseen, kOnPath, kDone };
  std::map<Key, State> state;
  for (const auto& [root, unused] : functions) {
    if (state[root] != kUnseen) continue;
    std::vector<std::pair<Key, std::size_t>> stack = {{root, 0}};
    state[root] = kOnPath;
    while (!stack.empty()) {
      auto& [key, next] = stack.back();
      const auto& calls = callees[key];
      if (next == calls.size()) {
        state[key] = kDone;
        stack.pop_back();
        continue;
      }
      Key callee = calls[next++];
      if (state[callee] == kOnPath) {
        std::string cycle;
        bool on = false;
        for (const auto& frame : stack) {
          on = on || frame.first == callee;
          if (on) cycle += label(frame.first) + " -> ";
        }
        throw InputError(path + ": model-local function '" + label(callee) + "' calls itself (" + cycle + label(callee) +
                         "): recursion is not allowed in ONNX");
      }
      if (state[callee] == kUnseen) {
        state[callee] = kOnPath;
        stack.push_back({callee, 0});
      }
    }
  }
}

// Window attributes of convolutions and pools that shape inference divides by or trusts:
// strides, dilations, kernel sizes and group must be positive, pads not negative.
void check_window_attributes(const std::string& path, const onnx::ModelProto& proto) {
  static const std::set<std::string> kWindowed = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                                                  "AveragePool", "LpPool", "MaxRoiPool", "MaxUnpool", "DeformConv"};
  auto check = [&](const onnx::NodeProto& node) {
    if (!kWindowed.count(node.op_type())) return;
    std::string where = path + ": node " + (node.name().empty() ? std::string("(unnamed)") : "'" + node.name() + "'") +
                        " (" + node.op_type() + ")";
    for (const auto& attr : node.attribute()) {
      const auto& name = attr.name();
      bool positive = name == "strides" || name == "dilations" || name == "kernel_shape" || name == "group";
      bool non_negative = name == "pads" || name == "output_padding";
      if (!positive && !non_negative) continue;
      std::vector<std::int64_t> values(attr.ints().begin(), attr.ints().end());
      if (attr.type() == onnx::AttributeProto::INT) values.push_back(attr.i());
      for (auto v : values) {
        if (positive && v <= 0) throw InputError(where + " has " + name + " " + std::to_string(v) + ": must be positive");
        if (non_negative && v < 0) throw InputError(where + " has " + name + " " + std::to_string(v) + ": must not be negative");
      }
    }
  };
  for_each_node(proto.graph(), check);
  for (const auto& function : proto.functions())
    for (const auto& node : function.node()) check(node);
}

void check_structure(const std::string& path, const onnx::ModelProto& skeleton) {
  try {
    onnx::checker::check_model(skeleton);
  } catch (const std::exception& e) {
    throw InputError(path + ": invalid ONNX model: " + first_line(e.what()));
  }
}

// --- What the checker checks, for models newer than the library (onnx_opsets.h) ---

InputError invalid_model(const std::string& path, const std::string& what) {
  return InputError(path + ": invalid ONNX model: " + what);
}

std::string node_description(const onnx::NodeProto& node) {
  return "node " + (node.name().empty() ? std::string("(unnamed)") : quoted(node.name())) + " (" +
         text_excerpt(node.op_type()) + ")";
}

// The main graph reads each value after the node or input that defines it, and defines it once;
// subgraphs (If, Loop, Scan bodies) may also read values of the scopes around them, so their
// reads are checked against every name of the model.
void check_names_defined(const std::string& path, const onnx::GraphProto& graph) {
  std::set<std::string> everywhere;
  for_each_graph(graph, [&](const onnx::GraphProto& g) {
    for (const auto& input : g.input()) everywhere.insert(input.name());
    for (const auto& init : g.initializer()) everywhere.insert(init.name());
    for (const auto& node : g.node()) everywhere.insert(node.output().begin(), node.output().end());
  });
  std::set<std::string> defined;
  for (const auto& input : graph.input()) defined.insert(input.name());
  for (const auto& init : graph.initializer()) defined.insert(init.name());
  for (const auto& node : graph.node()) {
    for (const auto& name : node.input()) {
      if (!name.empty() && !defined.count(name)) {
        throw invalid_model(path, node_description(node) + " reads " + quoted(name) + ", which nothing before it defines");
      }
    }
    for (const auto& name : node.output()) {
      if (!name.empty() && !defined.insert(name).second) {
        throw invalid_model(path, quoted(name) + " is defined twice (again by " + node_description(node) + ")");
      }
    }
  }
  for (const auto& output : graph.output()) {
    if (!defined.count(output.name())) throw invalid_model(path, "graph output " + quoted(output.name()) + " is never defined");
  }
  for_each_node(graph, [&](const onnx::NodeProto& node) {
    for (const auto& name : node.input()) {
      if (!name.empty() && !everywhere.count(name)) {
        throw invalid_model(path, node_description(node) + " reads " + quoted(name) + ", which nothing defines");
      }
    }
  });
}

std::string attribute_type_name(int type) {
  return onnx::AttributeProto_AttributeType_IsValid(type)
             ? onnx::AttributeProto_AttributeType_Name(static_cast<onnx::AttributeProto::AttributeType>(type))
             : std::to_string(type);
}

// The input and output counts and the attributes of one default-domain node, against the form
// of onnx_opsets.h or else the library's schema of the op.
struct OpSignature {
  std::string name;  // "ReduceMean-18"
  int min_inputs = 0, max_inputs = 0, min_outputs = 0, max_outputs = 0;
  std::map<std::string, onnx_opsets::AttributeSpec> attributes;
};

std::optional<OpSignature> signature_of(const std::string& op, int opset) {
  OpSignature sig;
  if (const auto* form = onnx_opsets::op_form(op, opset)) {
    sig = {op + "-" + std::to_string(form->since), form->min_inputs, form->max_inputs, form->min_outputs,
           form->max_outputs, {}};
    for (const auto& attr : form->attributes) sig.attributes[attr.name] = attr;
    return sig;
  }
  const auto* schema = library_schema(op, opset);
  if (!schema) return std::nullopt;
  sig = {op + "-" + std::to_string(schema->SinceVersion()), schema->min_input(), schema->max_input(),
         schema->min_output(), schema->max_output(), {}};
  for (const auto& [name, attr] : schema->attributes()) sig.attributes[name] = {"", attr.type, attr.required};
  return sig;
}

void check_node_signature(const std::string& path, const onnx::NodeProto& node, const OpSignature& sig) {
  auto range = [](int low, int high) {
    return high == low ? std::to_string(low) : std::to_string(low) + " to " + (high == INT_MAX ? "any" : std::to_string(high));
  };
  if (node.input_size() < sig.min_inputs || node.input_size() > sig.max_inputs) {
    throw invalid_model(path, node_description(node) + " has " + std::to_string(node.input_size()) + " inputs; " +
                                  sig.name + " takes " + range(sig.min_inputs, sig.max_inputs));
  }
  if (node.output_size() < sig.min_outputs || node.output_size() > sig.max_outputs) {
    throw invalid_model(path, node_description(node) + " has " + std::to_string(node.output_size()) + " outputs; " +
                                  sig.name + " gives " + range(sig.min_outputs, sig.max_outputs));
  }
  std::set<std::string> present;
  for (const auto& attr : node.attribute()) {
    auto spec = sig.attributes.find(attr.name());
    if (spec == sig.attributes.end()) {
      throw invalid_model(path, node_description(node) + " has attribute " + quoted(attr.name()) + ", which " + sig.name +
                                    " does not define");
    }
    if (attr.type() != spec->second.type) {
      throw invalid_model(path, "attribute '" + attr.name() + "' of " + node_description(node) + " is " +
                                    attribute_type_name(attr.type()) + "; " + sig.name + " defines it as " +
                                    attribute_type_name(spec->second.type));
    }
    present.insert(attr.name());
  }
  for (const auto& [name, spec] : sig.attributes) {
    if (spec.required && !present.count(name)) {
      throw invalid_model(path, node_description(node) + " lacks attribute '" + name + "', which " + sig.name + " requires");
    }
  }
}

// For a model the library's checker does not know (opsets 18-23, IR versions 9 and 10): the
// version bounds, names defined before use and once, and every default-domain node's op,
// input and output counts and attribute types. Nodes of other domains and calls of the
// model's own functions are left to check_ops_known.
void check_newer_structure(const std::string& path, const onnx::ModelProto& proto) {
  if (proto.ir_version() < 3) {
    throw invalid_model(path, "IR version " + std::to_string(proto.ir_version()) + " predates opset imports (IR version 3)");
  }
  check_names_defined(path, proto.graph());
  std::set<std::string> functions;
  for (const auto& function : proto.functions()) {
    if (canonical_domain(function.domain()).empty()) functions.insert(function.name());
  }
  int opset = default_opset(proto);
  for_each_node(proto.graph(), [&](const onnx::NodeProto& node) {
    if (!canonical_domain(node.domain()).empty() || functions.count(node.op_type())) return;
    auto sig = signature_of(node.op_type(), opset);
    if (!sig) throw InputError(path + ": unsupported op " + quoted(op_kind(node)) + " (" + node_description(node) + ")");
    check_node_signature(path, node, *sig);
  });
}

std::set<std::string> initializer_names(const onnx::GraphProto& graph) {
  std::set<std::string> names;
  for (const auto& init : graph.initializer()) names.insert(init.name());
  return names;
}

// The model's batch inputs: graph inputs that are not initializers (older exports list both).
std::vector<const onnx::ValueInfoProto*> batch_inputs(const onnx::GraphProto& graph) {
  auto initializers = initializer_names(graph);
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& input : graph.input()) {
    if (!initializers.count(input.name())) inputs.push_back(&input);
  }
  return inputs;
}

// A model input's concrete dims, and whether dim 0 is the batch (given by --input or symbolic)
// rather than a fixed size such as that of a [S, S] mask.
struct ResolvedInput {
  std::vector<std::int64_t> dims;
  bool batched = false;
};
using InputDims = std::map<std::string, ResolvedInput>;

// The batch of a model exported with fixed input shapes (torch.onnx.export without dynamic_axes):
// no input has a symbolic dim 0, so dim 0 of the first input of rank 1 or more is the batch the
// model was traced at. Its Reshape targets and the like may hold that number, so it is the only
// batch its stages can run at. nullopt when some input's dim 0 is symbolic.
std::optional<std::int64_t> fixed_batch_of(const onnx::GraphProto& graph) {
  std::optional<std::int64_t> batch;
  for (const auto* input : batch_inputs(graph)) {
    const auto& type = input->type().tensor_type();
    if (!type.has_shape()) return std::nullopt;
    if (type.shape().dim_size() == 0) continue;
    const auto& dim = type.shape().dim(0);
    if (!dim.has_dim_value()) return std::nullopt;
    if (!batch) batch = dim.dim_value();
  }
  return batch;
}

std::string dynamic_axes_advice(const onnx::GraphProto& graph) {
  std::string entries;
  for (const auto* input : batch_inputs(graph)) entries += (entries.empty() ? "'" : ", '") + input->name() + "': {0: 'batch'}";
  return "export with dynamic_axes={" + entries + "} to plan other batch sizes";
}

// Concrete dims of each model input at the requested batch: an --input spec gives all of them,
// a symbolic dim 0 takes the batch, and any other symbolic dim needs a spec. In a model with a
// fixed batch, the inputs whose dim 0 is that batch are the batched ones.
InputDims resolve_input_dims(const std::string& path, const onnx::GraphProto& graph, const LoadOptions& options,
                             std::int64_t batch, std::optional<std::int64_t> fixed_batch) {
  InputDims dims;
  for (const auto* input : batch_inputs(graph)) {
    const auto& shape = input->type().tensor_type().shape();
    auto dtype = to_dtype(input->type().tensor_type().elem_type());
    auto spec = std::find_if(options.inputs.begin(), options.inputs.end(),
                             [&](const InputSpec& s) { return s.name == input->name(); });
    bool fixed_dim0 = fixed_batch && shape.dim_size() > 0 && shape.dim(0).dim_value() == *fixed_batch;
    if (spec != options.inputs.end()) {
      if (input->type().tensor_type().has_shape() && spec->dims.size() != static_cast<std::size_t>(shape.dim_size())) {
        throw InputError(path + ": --input '" + spec->name + "' has " + std::to_string(spec->dims.size()) +
                         " dims but the model input has " + std::to_string(shape.dim_size()));
      }
      if (fixed_dim0 && !spec->dims.empty() && spec->dims.front() != *fixed_batch) {
        throw InputError(path + ": --input '" + spec->name + "' has batch " + std::to_string(spec->dims.front()) +
                         " but the model was exported with a fixed batch of " + std::to_string(*fixed_batch) + "; " +
                         dynamic_axes_advice(graph));
      }
      check_tensor_size(path, "--input '" + spec->name + "'", spec->dims, dtype);
      dims[input->name()] = {spec->dims, !fixed_batch || fixed_dim0};
      continue;
    }
    ResolvedInput resolved;
    resolved.batched = fixed_dim0;
    for (int d = 0; d < shape.dim_size(); ++d) {
      const auto& dim = shape.dim(d);
      if (dim.has_dim_value() && dim.dim_value() < 0) {
        throw InputError(path + ": input '" + input->name() + "' has a negative dim");
      } else if (dim.has_dim_value()) {
        resolved.dims.push_back(dim.dim_value());
      } else if (d == 0) {
        resolved.dims.push_back(batch);
        resolved.batched = true;
      } else {
        throw InputError(path + ": input '" + input->name() + "' dim " + std::to_string(d) + " is symbolic ('" +
                         dim.dim_param() + "'); give its shape with --input " + input->name() + ":DIMS");
      }
    }
    check_tensor_size(path, "input '" + input->name() + "'", resolved.dims, dtype);
    dims[input->name()] = resolved;
  }
  return dims;
}

// A copy of the model with every dim and small int tensor but no bulk weight data, and no stored
// dims to clash with the ones inferred at a new batch size. Large and external-data
// initializers become typed graph inputs, so neither the checker nor shape inference looks for
// their data.
onnx::ModelProto dims_only_copy(const onnx::ModelProto& proto) {
  onnx::ModelProto skeleton;
  skeleton.set_ir_version(proto.ir_version());
  *skeleton.mutable_opset_import() = proto.opset_import();
  *skeleton.mutable_functions() = proto.functions();
  const auto& graph = proto.graph();
  auto* copy = skeleton.mutable_graph();
  copy->set_name(graph.name());
  *copy->mutable_node() = graph.node();
  *copy->mutable_input() = graph.input();
  *copy->mutable_output() = graph.output();
  for (auto& output : *copy->mutable_output()) {
    auto* type = output.mutable_type()->mutable_tensor_type();
    if (!type->has_shape()) continue;
    for (auto& dim : *type->mutable_shape()->mutable_dim()) dim.Clear();
  }
  std::set<std::string> inputs;
  for (const auto& input : graph.input()) inputs.insert(input.name());
  for (const auto& init : graph.initializer()) {
    auto numel = ir::checked_numel(dims_of(init));
    if (numel && *numel <= kSmallTensor && init.data_location() != TensorProto::EXTERNAL) {
      *copy->add_initializer() = init;
    } else if (!inputs.count(init.name())) {
      auto* input = copy->add_input();
      input->set_name(init.name());
      auto* type = input->mutable_type()->mutable_tensor_type();
      type->set_elem_type(init.data_type());
      for (auto dim : init.dims()) type->mutable_shape()->add_dim()->set_dim_value(dim);
    }
  }
  return skeleton;
}

onnx::ModelProto with_input_dims(onnx::ModelProto skeleton, const InputDims& input_dims) {
  for (auto& input : *skeleton.mutable_graph()->mutable_input()) {
    auto it = input_dims.find(input.name());
    if (it == input_dims.end()) continue;
    auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (auto dim : it->second.dims) shape->add_dim()->set_dim_value(dim);
  }
  return skeleton;
}

using TypeMap = OnnxTypeMap;

// ONNX 1.12's data propagation of Shape dereferences its input's type unchecked, so a Shape that
// reads a value inference left untyped (after an op it could not infer, or a node of a newer
// form not typed yet) crashed it. Every value a node makes gets an empty type to start from,
// which inference fills in where it can.
void add_empty_types(onnx::GraphProto& graph) {
  std::set<std::string> typed;
  for (const auto* list : {&graph.input(), &graph.value_info(), &graph.output()}) {
    for (const auto& info : *list) typed.insert(info.name());
  }
  for (const auto& node : graph.node()) {
    for (const auto& name : node.output()) {
      if (name.empty() || !typed.insert(name).second) continue;
      auto* info = graph.add_value_info();
      info->set_name(name);
      info->mutable_type();
    }
  }
}

// Runs ONNX shape inference and returns the type of every named value. Shape arithmetic that
// inference cannot follow is folded into constants and inference runs again, until nothing
// more folds. A model newer than the library is inferred in its opset-17 form, the newer forms'
// outputs typed by our rules (lower_for_library), until no more of them get a type; inference
// is strict for it in a last round only, and only when all of them have one (what reads an
// untyped value cannot be checked).
TypeMap infer_types(onnx::ModelProto skeleton, bool strict) {
  const bool newer = !library_reads(skeleton);
  auto options = [](bool strict_mode) {
    return onnx::ShapeInferenceOptions(/*check_type=*/false, /*error_mode=*/strict_mode ? 1 : 0, /*data_prop=*/true);
  };
  auto collect = [](const onnx::ModelProto& inferred) {
    TypeMap types;
    const auto& graph = inferred.graph();
    for (const auto* list : {&graph.input(), &graph.value_info(), &graph.output()}) {
      for (const auto& info : *list) {
        if (info.type().value_case() != onnx::TypeProto::VALUE_NOT_SET) types[info.name()] = info.type();
      }
    }
    return types;
  };
  auto infer = [&](onnx::ModelProto& model, bool strict_mode) {
    add_empty_types(*model.mutable_graph());
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), options(strict_mode));
  };
  // Each round can unlock one more Reshape in a chain, or one more node of a newer form.
  const int max_rounds = 256 + (newer ? skeleton.graph().node_size() : 0);
  TypeMap types;
  std::size_t typed = 0;
  for (int round = 0; round < max_rounds; ++round) {
    onnx::ModelProto inferred = skeleton;
    bool more_typed = false;
    if (newer) {
      auto lowered = lower_for_library(skeleton, types);
      more_typed = lowered.typed > typed;
      typed = lowered.typed;
      inferred = std::move(lowered.model);
    }
    infer(inferred, strict && !newer);
    types = collect(inferred);
    bool folded = fold_shape_arithmetic(*skeleton.mutable_graph(), types);
    // The first round of a newer model typed nothing of its own: it had no types to start from.
    bool first_of_newer = newer && round == 0;
    if (!folded && !more_typed && !first_of_newer) break;
  }
  if (newer && strict) {  // the final types, checked as the library checks its own opsets
    auto lowered = lower_for_library(skeleton, types);
    if (lowered.complete) infer(lowered.model, true);
  }
  return types;
}

ir::TensorType to_tensor_type(const onnx::TypeProto& type) {
  ir::TensorType result;
  const auto& tensor = type.tensor_type();
  result.dtype = to_dtype(tensor.elem_type());
  result.rank_known = tensor.has_shape();
  for (const auto& dim : tensor.shape().dim()) result.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  return result;
}

// The values of a small int64/int32 tensor stored inline, else monostate.
ir::Literal small_int_literal(const TensorProto& tensor) {
  auto values = small_int_values(tensor, kSmallTensor);
  return values ? ir::Literal(*values) : ir::Literal();
}

ir::Literal attribute_literal(const onnx::AttributeProto& attr) {
  switch (attr.type()) {
    case onnx::AttributeProto::INT: return attr.i();
    case onnx::AttributeProto::FLOAT: return static_cast<double>(attr.f());
    case onnx::AttributeProto::STRING: return attr.s();
    case onnx::AttributeProto::INTS: return std::vector<std::int64_t>(attr.ints().begin(), attr.ints().end());
    case onnx::AttributeProto::FLOATS: return std::vector<double>(attr.floats().begin(), attr.floats().end());
    case onnx::AttributeProto::TENSOR: {
      auto literal = small_int_literal(attr.t());
      return literal.index() == 0 ? ir::Literal(std::string("<tensor>")) : literal;
    }
    case onnx::AttributeProto::GRAPH: return std::string("<graph>");
    default: return std::string("<unsupported attribute type>");
  }
}

// Names a subgraph reads from the enclosing scope: ONNX lets Loop/If/Scan bodies use outer
// values directly. They become explicit inputs of the op, so that a stage that runs the op
// also holds, e.g., the embedding table a Loop body gathers from.
void collect_outer_reads(const onnx::GraphProto& graph, std::set<std::string> defined, std::set<std::string>& reads) {
  for (const auto& input : graph.input()) defined.insert(input.name());
  for (const auto& init : graph.initializer()) defined.insert(init.name());
  for (const auto& node : graph.node()) {
    for (const auto& name : node.input()) {
      if (!name.empty() && !defined.count(name)) reads.insert(name);
    }
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) collect_outer_reads(attr.g(), defined, reads);
      for (const auto& sub : attr.graphs()) collect_outer_reads(sub, defined, reads);
    }
    for (const auto& name : node.output()) defined.insert(name);
  }
}

// How a Loop body pools what it gathers (PyTorch exports EmbeddingBag as a Loop of Gather then
// ReduceSum, ReduceMean or ReduceMax over each bag), or empty when the body reduces nothing.
std::string loop_bag_mode(const onnx::NodeProto& node) {
  for (const auto& attr : node.attribute()) {
    if (!attr.has_g()) continue;
    for (const auto& inner : attr.g().node()) {
      if (inner.op_type() == "ReduceSum") return "sum";
      if (inner.op_type() == "ReduceMean") return "mean";
      if (inner.op_type() == "ReduceMax") return "max";
    }
  }
  return "";
}

std::vector<std::string> subgraph_outer_reads(const onnx::NodeProto& node) {
  std::set<std::string> reads;
  for (const auto& attr : node.attribute()) {
    if (attr.has_g()) collect_outer_reads(attr.g(), {}, reads);
    for (const auto& sub : attr.graphs()) collect_outer_reads(sub, {}, reads);
  }
  return {reads.begin(), reads.end()};
}

// Builds the IR from the proto and the inferred types.
class GraphBuilder {
 public:
  GraphBuilder(const std::string& path, const TypeMap& types) : path_(path), types_(types) {}

  ir::Graph build(const onnx::ModelProto& proto, const InputDims& input_dims) {
    const auto& graph = proto.graph();
    add_inputs(graph, input_dims);
    add_initializers(graph);
    for (int i = 0; i < graph.node_size(); ++i) add_node(graph.node(i), i);
    for (const auto& output : graph.output()) graph_.add_model_output(lookup(output.name(), "graph output"));
    return std::move(graph_);
  }

  const std::map<std::string, ir::ValueId>& ids() const { return ids_; }

 private:
  void add_inputs(const onnx::GraphProto& graph, const InputDims& input_dims) {
    for (const auto* input : batch_inputs(graph)) {
      ir::Value value;
      value.name = input->name();
      value.role = ir::ValueRole::kModelInput;
      value.type = to_tensor_type(input->type());
      value.type.shape = input_dims.at(input->name()).dims;
      value.type.rank_known = true;
      define(std::move(value));
    }
  }

  // The elements an initializer stores inline: raw bytes, or one of the typed fields. Weights in
  // external data (a shape-only model) are never read, so only their dims count.
  void check_initializer_data(const onnx::TensorProto& init, std::int64_t numel) const {
    if (init.data_location() == onnx::TensorProto::EXTERNAL) return;
    using T = onnx::TensorProto;
    int type = init.data_type();
    std::int64_t stored = 0, expected = numel;
    if (init.has_raw_data()) {
      int size = ir::dtype_size(to_dtype(type));
      if (size <= 0) return;  // strings and types without a fixed size
      stored = static_cast<std::int64_t>(init.raw_data().size());
      expected = numel * size;
    } else if (type == T::FLOAT || type == T::COMPLEX64) {
      stored = init.float_data_size(), expected = numel * (type == T::COMPLEX64 ? 2 : 1);
    } else if (type == T::DOUBLE || type == T::COMPLEX128) {
      stored = init.double_data_size(), expected = numel * (type == T::COMPLEX128 ? 2 : 1);
    } else if (type == T::INT64) {
      stored = init.int64_data_size();
    } else if (type == T::UINT32 || type == T::UINT64) {
      stored = init.uint64_data_size();
    } else if (type == T::STRING) {
      stored = init.string_data_size();
    } else {
      stored = init.int32_data_size();  // the smaller integer types, bool, float16 and bfloat16
    }
    if (stored != expected) {
      throw InputError(path_ + ": initializer '" + init.name() + "' stores " + std::to_string(stored) + " " +
                       (init.has_raw_data() ? "bytes" : "values") + " for " + std::to_string(expected) +
                       " (a truncated or corrupt file)");
    }
  }

  // ONNX does not tell trainable weights from buffers. Float initializers are parameters, except
  // the running statistics a BatchNormalization reads (inputs 3 and 4); others are buffers.
  void add_initializers(const onnx::GraphProto& graph) {
    std::set<std::string> statistics;
    for (const auto& node : graph.node()) {
      if (node.op_type() != "BatchNormalization") continue;
      for (int i = 3; i < node.input_size() && i <= 4; ++i) statistics.insert(node.input(i));
    }
    for (const auto& init : graph.initializer()) {
      auto numel = ir::checked_numel(dims_of(init));
      if (!numel) {
        throw InputError(path_ + ": initializer '" + init.name() + "' has negative dims or too many elements");
      }
      check_initializer_data(init, *numel);
      ir::Value value;
      value.name = init.name();
      value.type.dtype = to_dtype(init.data_type());
      value.type.shape = dims_of(init);
      bool trainable = ir::is_floating_point(value.type.dtype) && !statistics.count(init.name());
      value.role = trainable ? ir::ValueRole::kParam : ir::ValueRole::kBuffer;
      value.literal = small_int_literal(init);
      define(std::move(value));
    }
  }

  void add_node(const onnx::NodeProto& node, int index) {
    std::vector<ir::ValueId> inputs;
    for (const auto& name : node.input()) inputs.push_back(name.empty() ? absent_value() : lookup(name, node_label(node, index)));
    for (const auto& name : subgraph_outer_reads(node)) inputs.push_back(lookup(name, node_label(node, index)));
    check_window_fits(node, index);
    std::vector<ir::ValueId> outputs;
    for (const auto& name : node.output()) outputs.push_back(define(intermediate(name, node, index)));
    ir::OpId op = graph_.add_op(op_kind(node), std::move(inputs), outputs, index);
    for (const auto& attr : node.attribute()) graph_.op(op).attrs[attr.name()] = attribute_literal(attr);
    graph_.set_module_path(op, ir::module_path_from_onnx_name(node.name()));  // "/layers.0/fc1/Gemm"
    if (node.op_type() == "Loop") {
      auto mode = loop_bag_mode(node);
      if (!mode.empty()) graph_.op(op).attrs["bag_mode"] = mode;  // read by sharding/embedding_tables
    }
    if (node.op_type() == "Constant" && node.attribute_size() == 1 && node.attribute(0).has_t()) {
      graph_.value(outputs.front()).literal = small_int_literal(node.attribute(0).t());
    }
  }

  // A convolution or pool whose (dilated) kernel is larger than its padded input has no output;
  // shape inference would give it a negative or zero size.
  void check_window_fits(const onnx::NodeProto& node, int index) {
    static const std::set<std::string> kWindowed = {"Conv", "MaxPool", "AveragePool", "LpPool"};
    if (!kWindowed.count(node.op_type()) || node.input_size() == 0) return;
    auto input = types_.find(node.input(0));
    if (input == types_.end() || !input->second.has_tensor_type()) return;
    auto x = to_tensor_type(input->second);
    std::vector<std::int64_t> kernel, pads, dilations;
    std::string auto_pad = "NOTSET";
    for (const auto& attr : node.attribute()) {
      if (attr.name() == "kernel_shape") kernel.assign(attr.ints().begin(), attr.ints().end());
      if (attr.name() == "pads") pads.assign(attr.ints().begin(), attr.ints().end());
      if (attr.name() == "dilations") dilations.assign(attr.ints().begin(), attr.ints().end());
      if (attr.name() == "auto_pad") auto_pad = attr.s();
    }
    if (kernel.empty() && node.op_type() == "Conv" && node.input_size() > 1) {
      auto weight = types_.find(node.input(1));
      if (weight != types_.end() && weight->second.has_tensor_type()) {
        auto w = to_tensor_type(weight->second);
        if (w.rank_known && w.shape.size() > 2) kernel.assign(w.shape.begin() + 2, w.shape.end());
      }
    }
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return;  // pads to the kernel
    if (auto_pad == "VALID") pads.clear();
    std::size_t spatial = kernel.size();
    if (spatial == 0 || !x.rank_known || x.shape.size() != spatial + 2) return;
    for (std::size_t d = 0; d < spatial; ++d) {
      auto size = x.shape[2 + d];
      if (size < 0 || kernel[d] <= 0) continue;
      __int128 padded = static_cast<__int128>(size);
      if (pads.size() == 2 * spatial) padded += static_cast<__int128>(pads[d]) + pads[d + spatial];
      __int128 dilation = dilations.size() == spatial ? dilations[d] : 1;
      __int128 extent = (static_cast<__int128>(kernel[d]) - 1) * dilation + 1;
      if (extent > padded) {
        throw InputError(path_ + ": node " + node_label(node, index) + " (" + node.op_type() + "): its kernel spans " +
                         std::to_string(static_cast<long long>(std::min<__int128>(extent, INT64_MAX))) +
                         " along spatial dim " + std::to_string(d) + " but its padded input only " +
                         std::to_string(static_cast<long long>(padded)));
      }
    }
  }

  ir::Value intermediate(const std::string& name, const onnx::NodeProto& node, int index) {
    ir::Value value;
    value.name = name;
    auto type = types_.find(name);
    if (type != types_.end() && type->second.has_tensor_type()) {
      value.type = to_tensor_type(type->second);
      for (const auto& dim : type->second.tensor_type().shape().dim()) {
        if (dim.has_dim_value() && dim.dim_value() < 0) {
          throw InputError(path_ + ": node " + node_label(node, index) + " (" + node.op_type() + ") gives '" + name +
                           "' a negative dim (" + std::to_string(dim.dim_value()) + ")");
        }
      }
      if (value.type.shape_known()) {
        check_tensor_size(path_, "node " + node_label(node, index) + " (" + node.op_type() + ") output '" + name + "'",
                          value.type.shape, value.type.dtype);
      }
    } else if (type != types_.end()) {
      value.kind = ir::ValueKind::kOther;  // sequences and optionals
    } else {
      value.type.rank_known = false;
    }
    return value;
  }

  // An omitted optional input (an empty name): its own none value, so positions keep their meaning.
  ir::ValueId absent_value() {
    ir::Value value;
    value.kind = ir::ValueKind::kNone;
    return graph_.add_value(std::move(value));
  }

  ir::ValueId define(ir::Value value) {
    std::string name = value.name;
    ir::ValueId id = graph_.add_value(std::move(value));
    if (!name.empty()) ids_[name] = id;
    return id;
  }

  ir::ValueId lookup(const std::string& name, const std::string& user) {
    auto it = ids_.find(name);
    if (it == ids_.end()) throw InputError(path_ + ": node " + user + " reads '" + name + "', which nothing defines");
    return it->second;
  }

  const std::string& path_;
  const TypeMap& types_;
  ir::Graph graph_;
  std::map<std::string, ir::ValueId> ids_;
};

// The size a symbolic batch dim takes: --batch, else that of the first --input, else a fixed
// batch dim of another input, else 1.
std::int64_t symbolic_batch(const onnx::GraphProto& graph, const LoadOptions& options) {
  if (auto batch = requested_batch(options)) return *batch;
  for (const auto* input : batch_inputs(graph)) {
    const auto& shape = input->type().tensor_type().shape();
    if (shape.dim_size() > 0 && shape.dim(0).has_dim_value()) return shape.dim(0).dim_value();
  }
  return 1;
}

// The inputs at twice the batch; nullopt when a doubled shape would overflow.
std::optional<InputDims> with_doubled_batch(InputDims inputs) {
  for (auto& [name, input] : inputs) {
    if (!input.batched || input.dims.empty()) continue;
    input.dims[0] *= 2;
    if (!ir::checked_numel(input.dims)) return std::nullopt;
  }
  return inputs;
}

// Shapes at twice the batch, by value id, for ir::assign_batch_dims. A model that cannot be
// evaluated at another batch (a fixed Reshape target, say) leaves them unknown.
ir::ShapesAtDoubleBatch shapes_at_double_batch(const ir::Graph& graph, const std::map<std::string, ir::ValueId>& ids,
                                               const onnx::ModelProto& skeleton,
                                               const InputDims& input_dims) {
  ir::ShapesAtDoubleBatch shapes(graph.values().size());
  auto doubled = with_doubled_batch(input_dims);
  if (!doubled) return {};
  try {
    TypeMap types = infer_types(with_input_dims(skeleton, *doubled), /*strict=*/false);
    for (const auto& [name, id] : ids) {
      auto type = types.find(name);
      if (type == types.end() || !type->second.has_tensor_type()) continue;
      auto tensor = to_tensor_type(type->second);
      if (tensor.rank_known) shapes[static_cast<std::size_t>(id)] = tensor.shape;
    }
    for (const auto& [name, input] : *doubled) shapes[static_cast<std::size_t>(ids.at(name))] = input.dims;
  } catch (const std::exception&) {
    return {};
  }
  return shapes;
}

// A fixed batch is the only microbatch the stages can run; the global batch (--batch) must be
// whole microbatches of it, and the planner needs it to fit an int like any batch.
void check_fixed_batch(const std::string& path, const onnx::GraphProto& graph, std::int64_t batch,
                       const LoadOptions& options) {
  constexpr std::int64_t kMaxBatch = std::numeric_limits<int>::max();
  if (batch < 1 || batch > kMaxBatch) {
    throw InputError(path + ": the model's inputs have a fixed batch of " + std::to_string(batch) +
                     (batch < 1 ? ", which holds no sample" : ", larger than a plan supports (2^31 - 1)") + "; " +
                     dynamic_axes_advice(graph));
  }
  if (options.batch && *options.batch % batch != 0) {
    throw InputError("--batch " + std::to_string(*options.batch) + ": " + path +
                     " was exported with a fixed batch of " + std::to_string(batch) +
                     ", so every microbatch is " + std::to_string(batch) + " samples and the global batch a multiple of it; " +
                     dynamic_axes_advice(graph));
  }
}

}  // namespace

Model load_onnx(const std::string& path, const LoadOptions& options) {
  google::protobuf::SetLogHandler(nullptr);  // parse failures become our one-line error, not log noise
  auto proto = parse_model(path);
  check_versions(path, *proto);
  check_ops_known(path, *proto);
  check_functions_acyclic(path, *proto);
  check_window_attributes(path, *proto);
  const onnx::ModelProto skeleton = dims_only_copy(*proto);
  if (library_reads(*proto)) {
    check_structure(path, skeleton);
  } else {
    check_newer_structure(path, *proto);
  }
  const auto& graph_proto = proto->graph();
  std::vector<std::string> input_names;
  for (const auto* input : batch_inputs(graph_proto)) input_names.push_back(input->name());
  check_input_names(path, options, input_names);

  Model model;
  model.path = path;
  model.format = ModelFormat::kOnnx;
  model.fixed_batch = fixed_batch_of(graph_proto);
  if (model.fixed_batch) check_fixed_batch(path, graph_proto, *model.fixed_batch, options);
  auto input_dims =
      resolve_input_dims(path, graph_proto, options, symbolic_batch(graph_proto, options), model.fixed_batch);
  auto inputs = batch_inputs(graph_proto);
  const auto& first_dims = inputs.empty() ? std::vector<std::int64_t>{} : input_dims.at(inputs.front()->name()).dims;
  model.batch = first_dims.empty() ? 1 : first_dims.front();
  TypeMap types;
  try {
    types = infer_types(with_input_dims(skeleton, input_dims), /*strict=*/true);
  } catch (const std::exception& e) {
    throw InputError(path + ": shape inference failed: " + first_line(e.what()));
  }
  GraphBuilder builder(path, types);
  model.graph = builder.build(*proto, input_dims);
  ir::assign_batch_dims(model.graph, model.batch, shapes_at_double_batch(model.graph, builder.ids(), skeleton, input_dims));
  model.source = std::make_shared<OnnxModelSource>(proto);
  return model;
}

}  // namespace rannc
