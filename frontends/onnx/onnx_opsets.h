// The ONNX this frontend reads beyond the linked ONNX library: opsets up to 23, IR versions up
// to 10. Debian 12's ONNX 1.12 knows opset 17 and IR version 8; its checker refuses newer
// models and its shape inference reads the newer forms of changed ops with their old meaning
// (ReduceMean's axes input is ignored, for one). This table is the one place that says what
// opsets 18-23 added or changed that the frontend reads: the checker (onnx_frontend.cpp), the
// shape inference (onnx_shape_arithmetic.cpp) and the stage writer (onnx_stage_source.cpp,
// where each op's TorchScript mapping is) all take it from here.
#pragma once

#include <onnx/onnx_pb.h>

#include <climits>
#include <string>
#include <vector>

namespace rannc::onnx_opsets {

constexpr int kMaxOpset = 23;
constexpr int kMaxIrVersion = 10;
// The opset every library this builds against knows (ONNX 1.12's last): newer models are
// lowered to it for the library's shape inference.
constexpr int kLibraryOpset = 17;
constexpr int kLibraryIrVersion = 8;

// How shape inference treats a form, in a model the library does not know.
enum class ShapeRule {
  kLibrary,    // the opset-17 inference of the op gives the same types
  kLikeInput,  // one output, of input 0's type and shape (inferred as an Identity)
  kReduce,     // axes from input 1: as the opset-17 attribute when a constant, else rank only
  kSplit,      // num_outputs: sizes from the input's shape
  kPad,        // pads over the axes of input 3
  kResize,     // Resize with axes or keep_aspect_ratio_policy
  kAttention,  // Q, K, V (3-D or 4-D), past key and value
};

struct AttributeSpec {
  const char* name;
  onnx::AttributeProto::AttributeType type;
  bool required = false;
};

// One op as an opset from 18 to 23 defines it: its inputs and outputs (counts), its attributes
// (all of them: they replace the library's schema), and how its shapes are inferred.
struct OpForm {
  const char* op;
  int since;
  int min_inputs, max_inputs;
  int min_outputs, max_outputs;
  std::vector<AttributeSpec> attributes;
  ShapeRule shape;
};

inline const std::vector<OpForm>& op_forms() {
  using A = onnx::AttributeProto;
  static const std::vector<AttributeSpec> kReduceAttributes = {{"keepdims", A::INT}, {"noop_with_empty_axes", A::INT}};
  static const std::vector<OpForm> forms = [] {
    std::vector<OpForm> f = {
        // Opset 18: axes of reductions and pads as inputs, Split into a number of outputs,
        // Resize on some axes keeping the aspect ratio, scatter with max and min.
        {"Split", 18, 1, 2, 1, INT_MAX, {{"axis", A::INT}, {"num_outputs", A::INT}}, ShapeRule::kSplit},
        {"Pad", 18, 2, 4, 1, 1, {{"mode", A::STRING}}, ShapeRule::kPad},
        {"Resize", 18, 1, 4, 1, 1,
         {{"antialias", A::INT}, {"axes", A::INTS}, {"coordinate_transformation_mode", A::STRING},
          {"cubic_coeff_a", A::FLOAT}, {"exclude_outside", A::INT}, {"extrapolation_value", A::FLOAT},
          {"keep_aspect_ratio_policy", A::STRING}, {"mode", A::STRING}, {"nearest_mode", A::STRING}},
         ShapeRule::kResize},
        {"ScatterND", 18, 3, 3, 1, 1, {{"reduction", A::STRING}}, ShapeRule::kLibrary},
        {"ScatterElements", 18, 3, 3, 1, 1, {{"axis", A::INT}, {"reduction", A::STRING}}, ShapeRule::kLibrary},
        {"GroupNormalization", 18, 3, 3, 1, 1, {{"epsilon", A::FLOAT}, {"num_groups", A::INT, true}},
         ShapeRule::kLikeInput},
        {"Mish", 18, 1, 1, 1, 1, {}, ShapeRule::kLikeInput},
        // Opset 19: saturating casts to float8, dilated average pooling.
        {"Cast", 19, 1, 1, 1, 1, {{"saturate", A::INT}, {"to", A::INT, true}}, ShapeRule::kLibrary},
        {"CastLike", 19, 2, 2, 1, 1, {{"saturate", A::INT}}, ShapeRule::kLibrary},
        {"AveragePool", 19, 1, 1, 1, 1,
         {{"auto_pad", A::STRING}, {"ceil_mode", A::INT}, {"count_include_pad", A::INT}, {"dilations", A::INTS},
          {"kernel_shape", A::INTS, true}, {"pads", A::INTS}, {"strides", A::INTS}},
         ShapeRule::kLibrary},
        // Opset 20: GELU as an op.
        {"Gelu", 20, 1, 1, 1, 1, {{"approximate", A::STRING}}, ShapeRule::kLikeInput},
        // Opset 21: GroupNormalization's scale and bias per channel (they were per group).
        {"GroupNormalization", 21, 3, 3, 1, 1,
         {{"epsilon", A::FLOAT}, {"num_groups", A::INT, true}, {"stash_type", A::INT}}, ShapeRule::kLikeInput},
        // Opset 23: the transformer ops.
        {"RMSNormalization", 23, 2, 2, 1, 1, {{"axis", A::INT}, {"epsilon", A::FLOAT}, {"stash_type", A::INT}},
         ShapeRule::kLikeInput},
        {"RotaryEmbedding", 23, 3, 4, 1, 1,
         {{"interleaved", A::INT}, {"num_heads", A::INT}, {"rotary_embedding_dim", A::INT}}, ShapeRule::kLikeInput},
        {"Attention", 23, 3, 6, 1, 4,
         {{"is_causal", A::INT}, {"kv_num_heads", A::INT}, {"q_num_heads", A::INT}, {"qk_matmul_output_mode", A::INT},
          {"scale", A::FLOAT}, {"softcap", A::FLOAT}, {"softmax_precision", A::INT}},
         ShapeRule::kAttention},
    };
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                           "ReduceLogSumExp", "ReduceSumSquare"}) {
      f.push_back({op, 18, 1, 2, 1, 1, kReduceAttributes, ShapeRule::kReduce});
    }
    return f;
  }();
  return forms;
}

// The newest form of `op` (default domain) at `opset` that this table defines, or nullptr when
// the op is as opset 17 defines it (or unknown).
inline const OpForm* op_form(const std::string& op, int opset) {
  const OpForm* found = nullptr;
  for (const auto& form : op_forms()) {
    if (op == form.op && form.since <= opset && (!found || form.since > found->since)) found = &form;
  }
  return found;
}

}  // namespace rannc::onnx_opsets
