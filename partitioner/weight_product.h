// A matrix product by a 2-D trainable weight, as the tensor-region analyses read it
// (tensor_regions.cpp finds layers from these, vocabulary_regions.cpp the output layer).
#pragma once

#include <optional>

#include "ir/graph.h"

namespace rannc::partition {

struct WeightProduct {
  ir::ValueId activation = ir::kNoId;
  ir::ValueId weight = ir::kNoId;    // the parameter as stored
  ir::OpId transpose = ir::kNoId;    // the op transposing the parameter into the product, if any
  int out_features_dim = 0;          // of the stored weight: what a column op splits
  int in_features_dim = 1;           // what a row op splits
  ir::ValueId bias = ir::kNoId;      // a bias the product adds itself (linear, addmm, Gemm)
};

// Whether a value is a 2-D trainable parameter of known shape.
bool is_matrix_param(const ir::Graph& graph, ir::ValueId id);

// The product as its kind's signature gives it: linear(x, W[out,in], b), matmul/mm/MatMul(x,
// W[in,out]), addmm(b, x, W[in,out]), Gemm(A, B, C) with transB, the weight possibly seen
// through a transpose; nullopt for any other op.
std::optional<WeightProduct> weight_product(const ir::Graph& graph, const ir::Op& op);

}  // namespace rannc::partition
