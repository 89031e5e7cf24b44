// Small hand-built ONNX models for unit tests, and a temporary file to load them from.
#pragma once

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "support/error.h"

namespace rannc::testing {

// A model file written for the test and removed after it.
struct ModelFile {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rannc_onnx_test_" + std::to_string(::getpid()));
  std::filesystem::path path = dir / "model.onnx";
  explicit ModelFile(const onnx::ModelProto& model) {
    std::filesystem::create_directories(dir);
    std::ofstream out(path, std::ios::binary);
    model.SerializeToOstream(&out);
  }
  ~ModelFile() { std::filesystem::remove_all(dir); }
};

inline onnx::ModelProto empty_model() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  model.mutable_graph()->set_name("test");
  return model;
}

// A graph input or output; each dim is a number or a symbol. No dims is a scalar.
inline void add_value_info(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
                           const std::vector<std::string>& dims, int elem_type = onnx::TensorProto::FLOAT) {
  auto* info = list->Add();
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(elem_type);
  type->mutable_shape();  // a scalar has a shape with no dims
  for (const auto& d : dims) {
    auto* dim = type->mutable_shape()->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

inline onnx::NodeProto* add_node(onnx::GraphProto* graph, const std::string& op, std::vector<std::string> inputs,
                                 std::vector<std::string> outputs, const std::string& name = "") {
  auto* node = graph->add_node();
  node->set_op_type(op);
  node->set_name(name.empty() ? op + "_" + std::to_string(graph->node_size()) : name);
  for (const auto& input : inputs) node->add_input(input);
  for (const auto& output : outputs) node->add_output(output);
  return node;
}

// A float tensor of the given dims whose element i is i / 2, in float_data.
inline onnx::TensorProto float_tensor(const std::string& name, std::vector<std::int64_t> dims) {
  onnx::TensorProto tensor;
  tensor.set_name(name);
  tensor.set_data_type(onnx::TensorProto::FLOAT);
  std::int64_t n = 1;
  for (auto d : dims) {
    tensor.add_dims(d);
    n *= d;
  }
  for (std::int64_t i = 0; i < n; ++i) tensor.add_float_data(0.5f * static_cast<float>(i));
  return tensor;
}

// An int64 vector of `values`, or with `scalar` a rank-0 tensor of its one value.
inline onnx::TensorProto int_tensor(const std::string& name, std::vector<std::int64_t> values, bool scalar = false) {
  onnx::TensorProto tensor;
  tensor.set_name(name);
  tensor.set_data_type(onnx::TensorProto::INT64);
  if (!scalar) tensor.add_dims(static_cast<std::int64_t>(values.size()));
  for (auto v : values) tensor.add_int64_data(v);
  return tensor;
}

// The message of the InputError that `f` throws.
inline std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

}  // namespace rannc::testing
