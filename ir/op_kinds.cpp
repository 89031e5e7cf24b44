#include "ir/op_kinds.h"

#include <unordered_map>

namespace rannc::ir {
namespace {

using namespace op_trait;

struct Table {
  std::vector<OpKind> rows;
  std::vector<OpKindFamily> families;
  std::unordered_map<std::string_view, const OpKind*> by_name;
  OpTraits family_traits = kNoTraits;  // the union of the families' traits: others need no family scan
};

const Table& table() {
  static const Table t = [] {
    Table t;
    t.rows = {
#define OP_KIND(name, op_class, flops_per_element, traits) {name, OpClass::k##op_class, flops_per_element, traits},
#include "ir/op_kinds.def"
    };
    t.families = {
#define OP_KIND_FAMILY(match, text, traits) {OpKindFamily::Match::k##match, text, traits},
#include "ir/op_kinds.def"
    };
    // A kind listed twice keeps its first row; tests/unit/op_kinds_test.cpp checks that none is.
    for (const auto& row : t.rows) t.by_name.emplace(row.name, &row);
    for (const auto& family : t.families) t.family_traits |= family.traits;
    return t;
  }();
  return t;
}

bool matches(const OpKindFamily& family, std::string_view kind) {
  switch (family.match) {
    case OpKindFamily::Match::kPrefix: return kind.substr(0, family.text.size()) == family.text;
    case OpKindFamily::Match::kContaining: return kind.find(family.text) != std::string_view::npos;
  }
  return false;
}

const OpKind* own_row(std::string_view kind) {
  const auto& by_name = table().by_name;
  auto it = by_name.find(kind);
  return it == by_name.end() ? nullptr : it->second;
}

}  // namespace

std::string_view op_class_name(OpClass op_class) {
  switch (op_class) {
    case OpClass::kMatMul: return "matmul";
    case OpClass::kConv: return "conv";
    case OpClass::kEmbedding: return "embedding";
    case OpClass::kNorm: return "norm";
    case OpClass::kSoftmax: return "softmax";
    case OpClass::kElementwise: return "elementwise";
    case OpClass::kReduction: return "reduction";
    case OpClass::kPool: return "pool";
    case OpClass::kDataMovement: return "data_movement";
    case OpClass::kGlue: return "glue";
    case OpClass::kUnknown: return "unknown";
  }
  return "unknown";
}

const std::vector<OpKind>& op_kinds() { return table().rows; }

const std::vector<OpKindFamily>& op_kind_families() { return table().families; }

std::string_view functional_kind(std::string_view kind) {
  if (kind.size() > 1 && kind.back() == '_' && kind.substr(0, 6) == "aten::") return kind.substr(0, kind.size() - 1);
  return kind;
}

const OpKind* find_op_kind(std::string_view kind) {
  if (const OpKind* row = own_row(kind)) return row;
  auto functional = functional_kind(kind);
  return functional.size() == kind.size() ? nullptr : own_row(functional);
}

OpClass op_class_of(std::string_view kind) {
  const OpKind* row = find_op_kind(kind);
  return row ? row->op_class : OpClass::kUnknown;
}

double flops_per_element(std::string_view kind) {
  const OpKind* row = find_op_kind(kind);
  return row ? row->flops_per_element : 0;
}

OpTraits op_traits(std::string_view kind) {
  OpTraits traits = kNoTraits;
  if (const OpKind* row = own_row(kind)) {
    traits = row->traits;
  } else if (auto functional = functional_kind(kind); functional.size() != kind.size()) {
    if (const OpKind* row = own_row(functional)) traits = row->traits & kOfFunctionalKind;
  }
  for (const auto& family : table().families)
    if (matches(family, kind)) traits |= family.traits;
  return traits;
}

bool has_op_trait(std::string_view kind, OpTraits traits) {
  const Table& t = table();
  if (const OpKind* row = own_row(kind)) {
    if (row->traits & traits) return true;
  } else if (auto functional = functional_kind(kind); functional.size() != kind.size()) {
    if (const OpKind* row = own_row(functional); row && (row->traits & traits & kOfFunctionalKind)) return true;
  }
  if (!(traits & t.family_traits)) return false;
  for (const auto& family : t.families)
    if ((family.traits & traits) && matches(family, kind)) return true;
  return false;
}

}  // namespace rannc::ir
