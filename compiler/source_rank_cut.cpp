#include "compiler/source_rank_cut.h"

namespace rannc {

void SourceRankCut::cut_weight(ir::ValueId id, StageAttribute& attribute) const {
  const auto* split = share_.split_weight(id);
  if (!split) return;
  // The weight as [outer, size, inner] around its split dim: each outer row keeps the rank's slices.
  auto dim = static_cast<std::size_t>(split->dim);
  std::size_t outer = 1, inner = static_cast<std::size_t>(ir::dtype_size(attribute.dtype));
  for (std::size_t d = 0; d < attribute.dims.size(); ++d) {
    if (d < dim) outer *= static_cast<std::size_t>(attribute.dims[d]);
    if (d > dim) inner *= static_cast<std::size_t>(attribute.dims[d]);
  }
  auto size = attribute.dims.at(dim);
  auto slices = share_.weight_slices(*split, size);
  std::int64_t kept = 0;
  for (const auto& slice : slices) kept += slice.length;
  std::string data;
  data.reserve(outer * static_cast<std::size_t>(kept) * inner);
  for (std::size_t row = 0; row < outer; ++row)
    for (const auto& slice : slices)
      data.append(attribute.data, (row * static_cast<std::size_t>(size) + static_cast<std::size_t>(slice.begin)) * inner,
                  static_cast<std::size_t>(slice.length) * inner);
  attribute.dims[dim] = kept;
  attribute.data = std::move(data);
}

void SourceRankCut::write_op(const ir::Op& op, std::string& body, std::string& prelude, const StageVariables& variables,
                             const std::function<void()>& write) {
  std::string before = std::move(body);
  body.clear();
  prelude.clear();
  writing_ = &op;
  write();
  writing_ = nullptr;
  if (share_.role(op.id) == emit::RankOp::kSequence) {
    for (auto output : op.outputs)
      if (const auto* variable = variables.variable(output); variable && graph_.value(output).is_tensor())
        sequence_.mark_split(*variable, 1);
  }
  body = before + prelude + body;
}

std::string SourceRankCut::read(ir::ValueId input, const std::string& expr, const Writer& writer) {
  return sequence_.read(expr, share_.operand(*writing_, input), collectives(writer));
}

std::string SourceRankCut::output(const std::string& variable, const Writer& writer) {
  return sequence_.whole(variable, collectives(writer));
}

void SourceRankCut::sum(const ir::Op& op, const std::string& variable, const std::string& bias, const Writer& writer) {
  auto insert = collectives(writer);
  std::string total = sequence_.sum(variable, share_.scatters(op.outputs.at(0)), insert);
  bool split = sequence_.dim(total) >= 0;
  // On the rank's part of the sequence, the bias's gradient is summed over the group.
  if (!bias.empty()) total = "torch.add(" + total + ", " + (split ? sequence_.shared(bias, insert) : bias) + ")";
  writer.line(variable + " = " + total);
  if (split) sequence_.mark_split(variable, 1);
}

SourceRankCut::Lookup SourceRankCut::vocabulary_ids(const ir::Op& op, const std::string& ids, const Writer& writer) const {
  auto rows = share_.vocabulary_rows(op.inputs.at(0));
  std::string begin = std::to_string(rows.begin), end = std::to_string(rows.begin + rows.length);
  Lookup lookup{writer.temp(), writer.temp()};
  writer.line(lookup.outside + " = torch.logical_or(torch.lt(" + ids + ", " + begin + "), torch.ge(" + ids + ", " + end +
              "))");
  writer.line(lookup.local + " = torch.masked_fill(torch.sub(" + ids + ", " + begin + "), " + lookup.outside + ", 0)");
  return lookup;
}

void SourceRankCut::sum_vocabulary_rows(const ir::Op& op, const std::string& variable, const Lookup& lookup,
                                        const Writer& writer) {
  writer.line(variable + " = torch.masked_fill(" + variable + ", torch.unsqueeze(" + lookup.outside + ", -1), 0.0)");
  sum(op, variable, "", writer);
}

std::string SourceRankCut::divided(const std::string& size) const {
  return "(" + size + " // " + std::to_string(share_.degree()) + ")";
}

emit::SequenceValues<std::string>::Insert SourceRankCut::collectives(const Writer& writer) const {
  return [writer](const char* op, const std::string& value, int dim) {
    std::string variable = writer.temp();
    writer.line(variable + " = " + tp::script_callee(op) + "(" + value + (dim < 0 ? "" : ", " + std::to_string(dim)) +
                ")");
    return variable;
  };
}

}  // namespace rannc
