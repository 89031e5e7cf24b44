// A stage as generated TorchScript source: what the frontends without a TorchScript module of
// their own (ONNX, torch.export's .pt2) write for each stage, and the torch plugin compiles with
// Module::define after registering the attributes. Pure C++.
#pragma once

#include <cctype>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"

namespace rannc {

// A tensor's elements as a file stored them: contiguous, little-endian.
struct StoredTensor {
  ir::DType dtype = ir::DType::kUnknown;
  std::vector<std::int64_t> dims;
  std::string data;  // numel * element size bytes
};

// A tensor the stage module holds: a weight of the stage (its StageLayout stage_name, "p0",
// "b1") or a constant too large to write inline ("c0", ...).
struct StageAttribute {
  std::string stage_name;
  bool trainable = false;           // a parameter (else a buffer)
  ir::DType dtype = ir::DType::kFloat32;
  std::vector<std::int64_t> dims;
  std::string data;                 // the elements, raw little-endian, numel * element size bytes
};

struct StageSource {
  // TorchScript source of one method, "def forward(self, <inputs>) -> Tuple[...]:", that takes
  // the stage's inputs in StageLayout order and returns the tuple of its outputs in order.
  std::string forward;
  std::vector<StageAttribute> attributes;
  // Selective recomputation: the lines of `forward` (0-based, the def line 0) that each of the
  // layout's recomputed_cores was written on; the plugin moves what they compile to into a method
  // of the core's own (frontends/torchscript/core_outlining.h).
  std::vector<std::vector<int>> core_lines;
};

// Which lines of a forward a stage's attention cores are written on (StageSource::core_lines),
// counted as the writer appends to its body (the forward's lines after the def line): before()
// before it writes each op, written() after.
class CoreLines {
 public:
  explicit CoreLines(const std::vector<std::vector<ir::OpId>>& cores) : lines_(cores.size()) {
    for (std::size_t k = 0; k < cores.size(); ++k)
      for (auto op : cores[k]) core_of_op_[op] = k;
  }

  void before(const std::string& body) { count(body); }
  // `body` now ends with the lines of op `id`.
  void written(ir::OpId id, const std::string& body) {
    int first = lines_so_far_ + 1;
    count(body);
    auto core = core_of_op_.find(id);
    if (core == core_of_op_.end()) return;
    for (int line = first; line <= lines_so_far_; ++line) lines_[core->second].push_back(line);
  }

  const std::vector<std::vector<int>>& lines() const { return lines_; }

 private:
  void count(const std::string& body) {
    for (; counted_ < body.size(); ++counted_) lines_so_far_ += body[counted_] == '\n';
  }

  std::map<ir::OpId, std::size_t> core_of_op_;
  std::vector<std::vector<int>> lines_;
  std::size_t counted_ = 0;  // characters of the body counted so far
  int lines_so_far_ = 0;
};

// The variable a value named `name` is bound to in generated source, a valid and readable
// TorchScript name: "onnx::Add_12" -> "v_onnx__Add_12" (a suffix "_N" keeps variables unique
// where two names give the same one). Inline: the torch plugin names ops by it.
inline std::string stage_variable_name(const std::string& name) {
  std::string out = "v_";
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  return out;
}

// The variables of one stage's generated source: one per value the stage takes in or makes,
// named after the value and unique, and `self.<stage_name>` for its weights.
class StageVariables {
 public:
  StageVariables(const ir::Graph& graph, int stage_id) : graph_(graph), stage_id_(stage_id) {}

  void add_weight(ir::ValueId id, const std::string& stage_name) { weights_[id] = stage_name; }

  // A fresh variable for a value (the one it has if it has one).
  std::string bind(ir::ValueId id) {
    if (auto it = names_.find(id); it != names_.end()) return it->second;
    const auto& name = graph_.value(id).name;
    std::string base = name.empty() ? "v__" + std::to_string(id) : stage_variable_name(name), unique = base;
    for (int n = 1; !taken_.insert(unique).second; ++n) unique = base + "_" + std::to_string(n);
    return names_[id] = unique;
  }

  // What reads a value: its variable, or its weight attribute.
  std::string expr(ir::ValueId id) const {
    if (auto it = names_.find(id); it != names_.end()) return it->second;
    if (auto it = weights_.find(id); it != weights_.end()) return "self." + it->second;
    throw std::logic_error("internal error: stage " + std::to_string(stage_id_) + " reads '" + graph_.value(id).name +
                           "', which is neither its input, nor made by its ops, nor its weight");
  }

  // The variable of a value bound so far, or nullptr.
  const std::string* variable(ir::ValueId id) const {
    auto it = names_.find(id);
    return it == names_.end() ? nullptr : &it->second;
  }

  // "<tensor>.device" of the stage's first input (`first_input`, ir::kNoId when it has none),
  // else of its first weight; "" when it has neither.
  std::string device(ir::ValueId first_input) const {
    if (first_input != ir::kNoId) return names_.at(first_input) + ".device";
    if (!weights_.empty()) return "self." + weights_.begin()->second + ".device";
    return "";
  }

 private:
  const ir::Graph& graph_;
  int stage_id_;
  std::map<ir::ValueId, std::string> names_;  // stage inputs and values made by stage ops
  std::map<ir::ValueId, std::string> weights_;  // value -> stage_name
  std::set<std::string> taken_;
};

}  // namespace rannc
