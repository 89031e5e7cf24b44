#include "sharding/table_constraints.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "support/error.h"
#include "support/input_file.h"

namespace rannc::sharding {
namespace {

constexpr std::uint64_t kMaxConstraintsBytes = std::uint64_t{16} << 20;
constexpr double kMaxPooling = 1e6;

std::string type_names() {
  std::string names;
  for (int i = 0; i < kShardingTypeCount; ++i)
    names += std::string(i ? ", " : "") + sharding_type_name(static_cast<ShardingType>(i));
  return names;
}

std::vector<ShardingType> read_types(const nlohmann::json& list, const std::string& where) {
  if (!list.is_array() || list.empty()) throw InputError(where + ": a non-empty list of sharding types (" + type_names() + ")");
  std::vector<ShardingType> types;
  for (const auto& name : list) {
    auto type = name.is_string() ? parse_sharding_type(name.get<std::string>()) : std::nullopt;
    if (!type) throw InputError(where + ": " + json_excerpt(name) + " is not a sharding type (" + type_names() + ")");
    types.push_back(*type);
  }
  return types;
}

Tier read_tier(const nlohmann::json& value, const std::string& where) {
  std::string name = value.is_string() ? value.get<std::string>() : "";
  if (name == "any") return Tier::kAny;
  if (name == "device") return Tier::kDevice;
  if (name == "host") return Tier::kHost;
  throw InputError(where + ": " + json_excerpt(value) + " is not a tier (device, host or any)");
}

double read_pooling(const nlohmann::json& value, const std::string& where) {
  double pooling = value.is_number() ? value.get<double>() : 0;
  if (!(pooling > 0 && pooling <= kMaxPooling))
    throw InputError(where + ": " + json_excerpt(value) + " is not a pooling factor (lookups per sample, above 0 and at most 1e6)");
  return pooling;
}

// A number in [least, most] (least excluded when `open`), else InputError naming `what` it is.
double read_number(const nlohmann::json& value, const std::string& where, double least, double most, bool open,
                   const std::string& what) {
  double number = value.is_number() ? value.get<double>() : std::nan("");
  if (!(open ? number > least : number >= least) || !(number <= most))
    throw InputError(where + ": " + json_excerpt(value) + " is not " + what);
  return number;
}

nlohmann::json parse(const std::string& path) {
  std::string text = read_regular_file(path, kMaxConstraintsBytes, "table constraints file");
  check_json_depth(text, path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": not valid JSON: " + clip(e.what()));
  }
}

}  // namespace

std::vector<TableConstraint> apply_table_constraints(const std::string& path, std::vector<EmbeddingTable>& tables) {
  nlohmann::json document = parse(path);
  if (!document.is_object() || document.size() != 1 || !document.contains("tables") || !document["tables"].is_object())
    throw InputError(path + ": expected {\"tables\": {TABLE: {...}, ...}}");
  std::vector<TableConstraint> constraints(tables.size());
  for (const auto& [name, entry] : document["tables"].items()) {
    std::string where = path + ": tables." + text_excerpt(name);
    auto table = std::find_if(tables.begin(), tables.end(), [&](const EmbeddingTable& t) { return t.weight == name; });
    if (table == tables.end())
      throw InputError(where + ": not an embedding table of the model (`rannc-partition inspect MODEL` lists them)");
    if (!entry.is_object()) throw InputError(where + ": expected an object");
    auto& constraint = constraints[static_cast<std::size_t>(table - tables.begin())];
    for (const auto& [key, value] : entry.items()) {
      if (key == "pooling") table->pooling = read_pooling(value, where + ".pooling");
      else if (key == "sharding_types") constraint.types = read_types(value, where + ".sharding_types");
      else if (key == "tier") constraint.tier = read_tier(value, where + ".tier");
      else if (key == "zipf") table->zipf = read_number(value, where + ".zipf", 0, 10, true, "a Zipf exponent (above 0, at most 10)");
      else if (key == "hit_rate") table->hit_rate = read_number(value, where + ".hit_rate", 0, 1, false, "a hit rate (0 to 1)");
      else throw InputError(where + ": unknown key '" + text_excerpt(key) + "' (known: pooling, sharding_types, tier, zipf, hit_rate)");
    }
    if (table->zipf > 0 && table->hit_rate >= 0) throw InputError(where + ": give zipf or hit_rate, not both");
  }
  return constraints;
}

}  // namespace rannc::sharding
