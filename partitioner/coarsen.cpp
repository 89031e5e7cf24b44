#include "partitioner/coarsen.h"

#include <metis.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace rannc::partition {
namespace {

constexpr int kMinUnitsPerPart = 4;

// METIS weights are integers; scale to 1..1001 so that no sum overflows its 32-bit idx_t.
idx_t scaled_weight(double x, double max) { return 1 + static_cast<idx_t>(max > 0 ? std::floor(1000.0 * x / max) : 0); }

struct CsrGraph {
  std::vector<idx_t> xadj, adjncy, adjwgt, vwgt;
};

CsrGraph to_csr(int n, const std::vector<UnitEdge>& edges, const std::vector<double>& unit_ms) {
  std::vector<std::map<int, double>> adjacency(static_cast<std::size_t>(n));
  double max_bytes = 0;
  for (const auto& edge : edges) {
    if (edge.from == edge.to) continue;
    adjacency[static_cast<std::size_t>(edge.from)][edge.to] += edge.bytes;
    adjacency[static_cast<std::size_t>(edge.to)][edge.from] += edge.bytes;
  }
  for (const auto& neighbours : adjacency)
    for (const auto& [_, bytes] : neighbours) max_bytes = std::max(max_bytes, bytes);
  double max_ms = *std::max_element(unit_ms.begin(), unit_ms.end());
  CsrGraph csr;
  csr.xadj.push_back(0);
  for (int v = 0; v < n; ++v) {
    for (const auto& [u, bytes] : adjacency[static_cast<std::size_t>(v)]) {
      csr.adjncy.push_back(u);
      csr.adjwgt.push_back(scaled_weight(bytes, max_bytes));
    }
    csr.xadj.push_back(static_cast<idx_t>(csr.adjncy.size()));
    csr.vwgt.push_back(scaled_weight(unit_ms[static_cast<std::size_t>(v)], max_ms));
  }
  return csr;
}

// Predecessor units of each unit: producers of any value its ops read, tensors or not.
std::vector<std::vector<int>> unit_predecessors(const ir::Graph& graph, const UnitGraph& units) {
  std::vector<std::vector<int>> predecessors(units.units.size());
  for (std::size_t unit = 0; unit < units.units.size(); ++unit) {
    auto& list = predecessors[unit];
    for (auto op : units.units[unit].ops) {
      for (auto input : graph.op(op).inputs) {
        auto producer = graph.value(input).producer;
        if (producer == ir::kNoId) continue;
        int from = units.unit_of_anchor[static_cast<std::size_t>(producer)];
        if (from >= 0 && from != static_cast<int>(unit)) list.push_back(from);
      }
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return predecessors;
}

// Kahn's algorithm that keeps taking ready units of the current part, else the earliest ready unit.
std::vector<int> part_preferring_order(const std::vector<std::vector<int>>& predecessors, const std::vector<int>& part) {
  std::size_t n = predecessors.size();
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);
  for (std::size_t unit = 0; unit < n; ++unit) {
    waiting[unit] = static_cast<int>(predecessors[unit].size());
    for (int from : predecessors[unit]) successors[static_cast<std::size_t>(from)].push_back(static_cast<int>(unit));
  }
  std::set<int> ready;
  std::map<int, std::set<int>> ready_by_part;
  auto make_ready = [&](int unit) {
    ready.insert(unit);
    ready_by_part[part[static_cast<std::size_t>(unit)]].insert(unit);
  };
  for (std::size_t unit = 0; unit < n; ++unit)
    if (waiting[unit] == 0) make_ready(static_cast<int>(unit));
  std::vector<int> order;
  int current = -1;
  while (!ready.empty()) {
    auto same = ready_by_part.find(current);
    int unit = same != ready_by_part.end() && !same->second.empty() ? *same->second.begin() : *ready.begin();
    current = part[static_cast<std::size_t>(unit)];
    ready.erase(unit);
    ready_by_part[current].erase(unit);
    order.push_back(unit);
    for (int next : successors[static_cast<std::size_t>(unit)])
      if (--waiting[static_cast<std::size_t>(next)] == 0) make_ready(next);
  }
  return order;
}

std::vector<int> part_runs(const std::vector<int>& order, const std::vector<int>& part) {
  std::vector<int> starts;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || part[static_cast<std::size_t>(order[i])] != part[static_cast<std::size_t>(order[i - 1])])
      starts.push_back(static_cast<int>(i));
  }
  return starts;
}

// Merges the adjacent pair of blocks with the least combined time until at most `target` remain.
void merge_to_target(std::vector<int>& starts, const std::vector<double>& position_ms, int target) {
  int count = static_cast<int>(starts.size());
  if (count <= std::max(target, 1)) return;
  std::vector<double> ms(count, 0);
  for (int b = 0; b < count; ++b) {
    int end = b + 1 < count ? starts[b + 1] : static_cast<int>(position_ms.size());
    for (int i = starts[b]; i < end; ++i) ms[b] += position_ms[i];
  }
  // A doubly linked list of the remaining blocks; candidate merges (a block with its successor) by time.
  std::vector<int> prev(count), next(count);
  for (int b = 0; b < count; ++b) prev[b] = b - 1, next[b] = b + 1 < count ? b + 1 : -1;
  auto pair_ms = [&](int b) { return ms[b] + ms[next[b]]; };
  std::set<std::pair<double, int>> merges;
  for (int b = 0; b + 1 < count; ++b) merges.insert({pair_ms(b), b});
  std::vector<bool> alive(count, true);
  for (int remaining = count; remaining > std::max(target, 1); --remaining) {
    int b = merges.begin()->second, absorbed = next[b];
    merges.erase(merges.begin());
    if (prev[b] >= 0) merges.erase({pair_ms(prev[b]), prev[b]});
    if (next[absorbed] >= 0) merges.erase({pair_ms(absorbed), absorbed});
    ms[b] += ms[absorbed];
    alive[absorbed] = false;
    next[b] = next[absorbed];
    if (next[b] >= 0) prev[next[b]] = b, merges.insert({pair_ms(b), b});
    if (prev[b] >= 0) merges.insert({pair_ms(prev[b]), prev[b]});
  }
  std::vector<int> kept;
  for (int b = 0; b < count; ++b)
    if (alive[b]) kept.push_back(starts[b]);
  starts = kept;
}

// Bytes alive between positions p-1 and p of the sequence, for p in [0, n]: tensors produced by a
// unit before p and read at or after p (model inputs are not sent between stages).
std::vector<double> live_bytes(const ir::Graph& graph, const UnitGraph& units, const std::vector<int>& order) {
  std::vector<int> position(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
  std::vector<double> delta(order.size() + 2, 0);
  for (const auto& tensor : units.tensors) {
    if (tensor.producer < 0 || tensor.consumers.empty()) continue;
    int produced = position[static_cast<std::size_t>(tensor.producer)];
    int last = produced;
    for (int consumer : tensor.consumers) last = std::max(last, position[static_cast<std::size_t>(consumer)]);
    double bytes = static_cast<double>(graph.value(tensor.value).type.bytes());
    delta[static_cast<std::size_t>(produced + 1)] += bytes;
    delta[static_cast<std::size_t>(last + 1)] -= bytes;
  }
  std::vector<double> live(order.size() + 1, 0);
  double running = 0;
  for (std::size_t p = 0; p <= order.size(); ++p) live[p] = running += delta[p];
  return live;
}

// Moves each boundary to the cheapest cut within half of its neighbouring blocks (ties: the nearest).
void snap_boundaries(std::vector<int>& starts, const std::vector<double>& live, int n) {
  for (std::size_t b = 1; b < starts.size(); ++b) {
    int previous = starts[b - 1];
    int next = b + 1 < starts.size() ? starts[b + 1] : n;
    int here = starts[b];
    int low = here - (here - previous) / 2, high = here + (next - here) / 2;
    int best = here;
    for (int p = std::max(low, previous + 1); p <= std::min(high, next - 1); ++p) {
      double a = live[static_cast<std::size_t>(p)], c = live[static_cast<std::size_t>(best)];
      if (a < c * (1 - 1e-9) || (a <= c * (1 + 1e-9) && std::abs(p - here) < std::abs(best - here))) best = p;
    }
    starts[b] = best;
  }
}

}  // namespace

int Blocking::end(int block) const {
  return block + 1 < count() ? starts[static_cast<std::size_t>(block + 1)] : static_cast<int>(order.size());
}

std::vector<int> metis_parts(int unit_count, const std::vector<UnitEdge>& edges, const std::vector<double>& unit_ms,
                             int parts) {
  // METIS fails on nparts = 1, and leaves parts empty (printing complaints on stdout) when they
  // would hold only a few vertices each: then every unit seeds a part of its own.
  if (parts <= 1) return std::vector<int>(static_cast<std::size_t>(unit_count), 0);
  if (parts * kMinUnitsPerPart > unit_count) {
    std::vector<int> each(static_cast<std::size_t>(unit_count));
    for (int i = 0; i < unit_count; ++i) each[static_cast<std::size_t>(i)] = i;
    return each;
  }
  CsrGraph csr = to_csr(unit_count, edges, unit_ms);
  idx_t n = unit_count, constraints = 1, nparts = parts, cut = 0;
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = 1;  // deterministic
  options[METIS_OPTION_NUMBERING] = 0;
  std::vector<idx_t> part(static_cast<std::size_t>(unit_count), 0);
  int status = METIS_PartGraphKway(&n, &constraints, csr.xadj.data(), csr.adjncy.data(), csr.vwgt.data(), nullptr,
                                   csr.adjwgt.data(), &nparts, nullptr, nullptr, options, &cut, part.data());
  if (status != METIS_OK) throw std::runtime_error("METIS_PartGraphKway failed with status " + std::to_string(status));
  return std::vector<int>(part.begin(), part.end());
}

Blocking coarsen(const ir::Graph& graph, const UnitGraph& units, const std::vector<double>& unit_ms, int target_blocks) {
  int n = static_cast<int>(units.units.size());
  auto part = metis_parts(n, unit_edges(graph, units), unit_ms, std::min(target_blocks, n));
  Blocking blocking;
  blocking.order = part_preferring_order(unit_predecessors(graph, units), part);
  blocking.starts = part_runs(blocking.order, part);
  std::vector<double> position_ms(blocking.order.size());
  for (std::size_t i = 0; i < blocking.order.size(); ++i) position_ms[i] = unit_ms[static_cast<std::size_t>(blocking.order[i])];
  merge_to_target(blocking.starts, position_ms, target_blocks);
  snap_boundaries(blocking.starts, live_bytes(graph, units, blocking.order), n);
  return blocking;
}

}  // namespace rannc::partition
