// Repeated layers must come out of coarsening as equal blocks: on a shape-only transformer,
// 90% of the blocks repeat with a period of at most 16 blocks
// (same unit count, same time).
//
// usage: repeated_blocks MODEL.onnx BLOCKS
#include <cmath>
#include <cstdio>
#include <string>

#include "compiler/model.h"
#include "cost_model/device.h"
#include "partitioner/planner.h"

namespace rannc::partition {
namespace {

struct BlockShape {
  int units = 0;
  double ms = 0;
  bool operator==(const BlockShape& other) const {
    return units == other.units && std::abs(ms - other.ms) <= 1e-9 * std::max(1.0, ms);
  }
};

int check(const std::string& path, int target) {
  LoadOptions load;
  load.batch = 8;
  Model model = load_model(path, load);
  cost::CostModel costs(model.graph, *cost::find_device_preset("a100-80g"), cost::Precision::kFp32, nullptr);
  UnitGraph units = build_units(model.graph);
  std::vector<double> unit_ms;
  for (const auto& unit : units.units) {
    double ms = 0;
    for (auto op : unit.ops) ms += costs.op_cost(op).fwd_ms + costs.op_cost(op).bwd_ms;
    unit_ms.push_back(ms);
  }
  Blocking blocking = coarsen(model.graph, units, unit_ms, target);
  std::vector<BlockShape> shapes;
  for (int b = 0; b < blocking.count(); ++b) {
    BlockShape shape{blocking.end(b) - blocking.begin(b), 0};
    for (int i = blocking.begin(b); i < blocking.end(b); ++i) shape.ms += unit_ms[blocking.order[i]];
    shapes.push_back(shape);
  }
  // Some period p (at most 16 blocks) must repeat for at least 90% of the blocks: the embedding,
  // the head and a layer merged to meet the block count may differ.
  for (int period = 1; period <= 16; ++period) {
    int repeating = 0;
    for (int b = 0; b + period < blocking.count(); ++b) repeating += shapes[b] == shapes[b + period];
    if (repeating >= 0.9 * blocking.count()) {
      std::printf("ok: %d of %d blocks repeat every %d block(s):", repeating, blocking.count(), period);
      for (int b = blocking.count() / 2; b < blocking.count() / 2 + period; ++b)
        std::printf(" %d units %.3f ms", shapes[b].units, shapes[b].ms);
      std::printf("\n");
      return 0;
    }
  }
  std::fprintf(stderr, "repeated_blocks: the blocks of %s do not repeat:", path.c_str());
  for (const auto& shape : shapes) std::fprintf(stderr, " %d/%.3f", shape.units, shape.ms);
  std::fprintf(stderr, "\n");
  return 1;
}

}  // namespace
}  // namespace rannc::partition

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: repeated_blocks MODEL.onnx BLOCKS\n");
    return 2;
  }
  try {
    return rannc::partition::check(argv[1], std::stoi(argv[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "repeated_blocks: %s\n", e.what());
    return 2;
  }
}
