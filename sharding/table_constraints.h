// --table-constraints FILE: what the user knows of each embedding table that the model's shapes
// do not say. A JSON object naming tables by their weight:
//
//   {"tables": {"emb_l.3.weight": {"pooling": 40, "sharding_types": ["row_wise", "table_row_wise"],
//                                  "tier": "device"}}}
//
// "pooling" (lookups per sample, > 0) replaces the one read from the example inputs;
// "sharding_types" limits the types the planner may choose; "tier" is "device", "host" or "any";
// the access skew of its rows, for the device cache of a host-tier table: "zipf" (an exponent,
// above 0 and at most 10) or "hit_rate" (measured, 0 to 1, taken for every cache size); uniform
// without either.
// Every key is checked: an unknown table, key or type is an error, never ignored.
#pragma once

#include <string>
#include <vector>

#include "sharding/embedding_tables.h"
#include "sharding/sharding_planner.h"

namespace rannc::sharding {

// One constraint per table (unconstrained where the file does not name it); sets the pooling
// of the tables it names. Throws InputError naming the file and the field.
std::vector<TableConstraint> apply_table_constraints(const std::string& path, std::vector<EmbeddingTable>& tables);

}  // namespace rannc::sharding
