#include "emit/pictures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "support/format.h"

namespace rannc::emit {
namespace {

using partition::SimulatedTask;
using partition::TaskKind;

// ---- schedule.svg ----

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        out += static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' ? ' ' : c;
    }
  }
  return out;
}

// Fixed decimals, so the same plan always gives the same bytes.
std::string fixed(double x, int decimals = 2) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, x);
  return text;
}

struct KindStyle {
  TaskKind kind;
  const char* colour;
};
// Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
constexpr KindStyle kStyles[] = {{TaskKind::kForward, "#0072b2"},
                                 {TaskKind::kBackward, "#e69f00"},
                                 {TaskKind::kActivationTransfer, "#009e73"},
                                 {TaskKind::kGradientTransfer, "#cc79a7"},
                                 {TaskKind::kAllreduce, "#d55e00"}};

const char* colour_of(TaskKind kind) {
  for (const auto& style : kStyles)
    if (style.kind == kind) return style.colour;
  return "#999999";
}

// Geometry of the picture, in px.
struct Layout {
  static constexpr double kLeft = 180, kWidth = 960, kRight = 30, kTop = 64, kRowPitch = 34;
  static constexpr double kComputeHeight = 16, kLaneHeight = 6;  // compute lane, then two transfer lanes
  double ms_scale = 1;                                           // px per ms
  double x(double ms) const { return kLeft + ms * ms_scale; }
};

// Transfers run beside compute: activations arriving in the first lane under it, gradients
// in the second. The allreduce keeps the stage busy after its last backward: compute lane.
std::pair<double, double> lane_of(TaskKind kind) {
  switch (kind) {
    case TaskKind::kActivationTransfer: return {Layout::kComputeHeight + 1, Layout::kLaneHeight};
    case TaskKind::kGradientTransfer: return {Layout::kComputeHeight + 2 + Layout::kLaneHeight, Layout::kLaneHeight};
    default: return {0, Layout::kComputeHeight};
  }
}

std::string task_tooltip(const SimulatedTask& task) {
  std::string text = std::string(partition::task_kind_name(task.kind));
  if (task.microbatch >= 0) text += ", microbatch " + std::to_string(task.microbatch);
  if (task.peer >= 0) text += ", from stage " + std::to_string(task.peer);
  return text + ": " + fixed(task.start_ms, 3) + " - " + fixed(task.end_ms, 3) + " ms";
}

std::string task_box(const SimulatedTask& task, const Layout& layout) {
  auto [y, height] = lane_of(task.kind);
  // At least 1.5 px, so that short transfers still show.
  double x = layout.x(task.start_ms), width = std::max(1.5, (task.end_ms - task.start_ms) * layout.ms_scale);
  std::ostringstream out;
  out << "<rect class=\"task\" data-kind=\"" << partition::task_kind_name(task.kind) << "\" x=\"" << fixed(x) << "\" y=\""
      << fixed(y) << "\" width=\"" << fixed(width) << "\" height=\"" << fixed(height) << "\" fill=\"" << colour_of(task.kind)
      << "\"><title>" << xml_escaped(task_tooltip(task)) << "</title></rect>";
  // The microbatch number inside compute boxes wide enough to hold it.
  bool compute = task.kind == TaskKind::kForward || task.kind == TaskKind::kBackward;
  if (compute && width >= 14) {
    out << "<text x=\"" << fixed(x + width / 2) << "\" y=\"" << fixed(y + 12) << "\" class=\"mb\">" << task.microbatch
        << "</text>";
  }
  return out.str() + "\n";
}

// A round tick step giving at most about ten ticks over `span` ms.
double tick_step(double span) {
  double raw = span / 10, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double mantissa : {1.0, 2.0, 5.0})
    if (mantissa * power >= raw) return mantissa * power;
  return 10 * power;
}

std::string time_axis(double span_ms, double rows_bottom, const Layout& layout) {
  double step = tick_step(span_ms);
  int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  std::ostringstream out;
  out << "<g class=\"axis\">\n";
  out << "<line x1=\"" << fixed(layout.x(0)) << "\" y1=\"" << fixed(rows_bottom) << "\" x2=\"" << fixed(layout.x(span_ms))
      << "\" y2=\"" << fixed(rows_bottom) << "\" stroke=\"#333\"/>\n";
  for (int i = 0; i * step <= span_ms * (1 + 1e-9); ++i) {
    double x = layout.x(i * step);
    out << "<line x1=\"" << fixed(x) << "\" y1=\"" << fixed(Layout::kTop - 4) << "\" x2=\"" << fixed(x) << "\" y2=\""
        << fixed(rows_bottom + 4) << "\" class=\"grid\"/>"
        << "<text x=\"" << fixed(x) << "\" y=\"" << fixed(rows_bottom + 18) << "\" text-anchor=\"middle\">"
        << fixed(i * step, decimals) << "</text>\n";
  }
  out << "<text x=\"" << fixed(layout.x(span_ms)) << "\" y=\"" << fixed(rows_bottom + 34)
      << "\" text-anchor=\"end\">time in the step (ms)</text>\n</g>\n";
  return out.str();
}

std::string legend() {
  std::ostringstream out;
  out << "<g class=\"legend\">\n";
  double x = Layout::kLeft;
  for (const auto& style : kStyles) {
    std::string name = partition::task_kind_name(style.kind);
    out << "<rect x=\"" << fixed(x) << "\" y=\"34\" width=\"12\" height=\"12\" fill=\"" << style.colour << "\"/><text x=\""
        << fixed(x + 16) << "\" y=\"44\">" << name << "</text>\n";
    x += 40 + 7 * name.size();
  }
  out << "</g>\n";
  return out.str();
}

// Above this many ranks the picture folds replicas and pipelines: one row per stage.
constexpr std::size_t kMaxRankRows = 16;
// Above this many tasks in the picture, each stage's boxes of one kind become one <path>.
constexpr std::size_t kMaxBoxes = 2000;

// The devices' rows: one per stage, or with interleaved stages one per device group (the stages
// s, s + groups, ...).
std::size_t device_groups(const partition::PlacedPipeline& plan) {
  return plan.stages.size() / static_cast<std::size_t>(std::max(plan.config.chunks, 1));
}

// Each device group's tasks, in the order they were scheduled.
std::vector<std::vector<const SimulatedTask*>> tasks_by_group(const partition::PlacedPipeline& plan) {
  std::vector<std::vector<const SimulatedTask*>> tasks(device_groups(plan));
  for (const auto& task : plan.simulation.tasks)
    if (task.stage >= 0 && task.stage < static_cast<int>(plan.stages.size())) tasks[task.stage % tasks.size()].push_back(&task);
  return tasks;
}

// "stage 3", or for an interleaved group "stages 3, 11, 19".
std::string group_name(std::size_t group, const partition::PlacedPipeline& plan) {
  const std::size_t groups = device_groups(plan);
  if (groups == plan.stages.size()) return "stage " + std::to_string(group);
  std::string name = "stages ";
  for (std::size_t s = group; s < plan.stages.size(); s += groups) name += (s == group ? "" : ", ") + std::to_string(s);
  return name;
}

// A length in hundredths of a px, as short as it goes: 1250 -> "12.5", -300 -> "-3".
std::string hundredths_text(long long hundredths) {
  std::string text = hundredths < 0 ? "-" : "";
  long long magnitude = hundredths < 0 ? -hundredths : hundredths;
  text += std::to_string(magnitude / 100);
  int fraction = static_cast<int>(magnitude % 100);
  if (fraction != 0) text += "." + std::to_string(fraction / 10) + (fraction % 10 ? std::to_string(fraction % 10) : "");
  return text;
}

// A stage's boxes of each kind as one path: boxes that overlap on screen (at least 1.5 px
// wide, like task_box) are joined, so a long run of thin boxes is one rectangle. Each rectangle
// is a stroke as thick as its lane along the lane's middle, moving on from the end of the one
// before: positions are rounded to 0.01 px first, so the relative moves do not drift.
std::string merged_boxes(const std::vector<const SimulatedTask*>& tasks, const Layout& layout) {
  std::ostringstream out;
  for (const auto& style : kStyles) {
    std::vector<std::pair<double, double>> spans;  // px, start and end
    for (const auto* task : tasks) {
      if (task->kind != style.kind) continue;
      double x = layout.x(task->start_ms);
      spans.emplace_back(x, x + std::max(1.5, (task->end_ms - task->start_ms) * layout.ms_scale));
    }
    if (spans.empty()) continue;
    std::sort(spans.begin(), spans.end());
    auto [y, height] = lane_of(style.kind);
    std::string name = partition::task_kind_name(style.kind);
    out << "<path class=\"tasks\" data-kind=\"" << name << "\" data-tasks=\"" << spans.size()
        << "\" fill=\"none\" stroke=\"" << style.colour << "\" stroke-width=\"" << fixed(height) << "\" d=\"";
    long long at = 0;  // the pen, in hundredths of a px
    bool first = true;
    for (std::size_t i = 0; i < spans.size();) {
      double begin = spans[i].first, end = spans[i].second;
      for (++i; i < spans.size() && spans[i].first <= end; ++i) end = std::max(end, spans[i].second);
      long long from = std::llround(begin * 100), to = std::llround(end * 100);
      if (first) out << "M" << hundredths_text(from) << " " << hundredths_text(std::llround((y + height / 2) * 100));
      else out << "m" << hundredths_text(from - at) << " 0";
      out << "h" << hundredths_text(to - from);
      at = to;
      first = false;
    }
    out << "\"><title>" << xml_escaped(name) << ": " << plural(static_cast<std::int64_t>(spans.size()), "task") << "</title></path>\n";
  }
  return out.str();
}

std::string stage_boxes(const std::vector<const SimulatedTask*>& tasks, const Layout& layout, bool merge) {
  if (merge) return merged_boxes(tasks, layout);
  std::string out;
  for (const auto* task : tasks) out += task_box(*task, layout);
  return out;
}

// Each device group's timeline once, in <defs>; every rank's row shows its group's with <use>.
std::string stage_timelines(const std::vector<std::vector<const SimulatedTask*>>& tasks, const Layout& layout,
                            bool merge) {
  std::ostringstream out;
  out << "<defs>\n";
  for (std::size_t s = 0; s < tasks.size(); ++s)
    out << "<g id=\"stage-" << s << "\">\n" << stage_boxes(tasks[s], layout, merge) << "</g>\n";
  out << "</defs>\n";
  return out.str();
}

// " · h100-80g": a mixed cluster's device kinds of ranks (" · a100-40g+h100-80g" for a stage
// the kinds share), for a row's label.
std::string kind_label(const partition::PlacedPipeline& plan, const std::vector<int>& ranks) {
  std::vector<std::string> kinds;
  for (int rank : ranks) {
    auto at = std::lower_bound(plan.ranks.begin(), plan.ranks.end(), rank,
                               [](const plan::RankPlacement& r, int wanted) { return r.rank < wanted; });
    if (at != plan.ranks.end() && at->rank == rank && !at->device.empty() &&
        std::find(kinds.begin(), kinds.end(), at->device) == kinds.end())
      kinds.push_back(at->device);
  }
  std::string label;
  for (const auto& kind : kinds) label += (label.empty() ? " &#183; " : "+") + kind;
  return label;
}

std::string rank_rows(const partition::PlacedPipeline& plan) {
  std::ostringstream out;
  double y = Layout::kTop;
  for (const auto& rank : plan.ranks) {
    out << "<g class=\"rank\" data-rank=\"" << rank.rank << "\" data-stage=\"" << rank.stage << "\" transform=\"translate(0,"
        << fixed(y) << ")\">"
        << "<text x=\"" << fixed(Layout::kLeft - 8) << "\" y=\"12\" text-anchor=\"end\">rank " << rank.rank
        << " &#183; " << group_name(static_cast<std::size_t>(rank.stage), plan) << kind_label(plan, {rank.rank}) << "</text>"
        << "<use href=\"#stage-" << rank.stage << "\"/></g>\n";
    y += Layout::kRowPitch;
  }
  return out.str();
}

// One row per stage (device group), its replicas and pipelines folded: the counts in the label and in
// data-ranks, data-replicas (per pipeline) and data-pipelines; the ranks in the tooltip.
std::string stage_rows(const partition::PlacedPipeline& plan, const std::vector<std::vector<const SimulatedTask*>>& tasks,
                       const Layout& layout, bool merge) {
  const std::int64_t pipelines = plan.config.pipelines;
  std::ostringstream out;
  double y = Layout::kTop;
  for (std::size_t s = 0; s < tasks.size(); ++s) {
    const auto& stage = plan.stages[s];
    const auto count = static_cast<std::int64_t>(stage.ranks.size());
    std::string counts = plural(stage.option.replicas, "replica") + " x " + plural(pipelines, "pipeline");
    std::string head = group_name(s, plan) + " &#183; " + plural(count, "rank") + kind_label(plan, stage.ranks);
    out << "<g class=\"stage\" data-stage=\"" << s << "\" data-ranks=\"" << count << "\" data-replicas=\""
        << stage.option.replicas << "\" data-pipelines=\"" << pipelines << "\" transform=\"translate(0," << fixed(y)
        << ")\">"
        << "<title>" << head << " (" << counts << "): ranks " << ranges_text(stage.ranks) << "</title>"
        << "<text x=\"" << fixed(Layout::kLeft - 8) << "\" y=\"12\" text-anchor=\"end\">" << head << "</text>"
        << "<text x=\"" << fixed(Layout::kLeft - 8) << "\" y=\"25\" text-anchor=\"end\" font-size=\"10\">(" << counts
        << ")</text>\n"
        << stage_boxes(tasks[s], layout, merge) << "</g>\n";
    y += Layout::kRowPitch;
  }
  return out.str();
}

// ---- stages.dot ----

std::string dot_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

// Lines of a DOT label, each escaped, joined by DOT's centred line break.
std::string dot_label(const std::vector<std::string>& lines) {
  std::string joined;
  for (const auto& line : lines) {
    std::string quoted = dot_quoted(line);
    joined += (joined.empty() ? "" : "\\n") + quoted.substr(1, quoted.size() - 2);
  }
  return "\"" + joined + "\"";
}

std::string shape_text(const plan::Tensor& tensor) {
  std::string text;
  for (auto dim : tensor.shape) text += (text.empty() ? "" : "x") + std::to_string(dim);
  return (text.empty() ? "scalar" : text) + " " + tensor.dtype;
}

// A tensor's bytes for one whole microbatch: a batched tensor is split among the receiving
// stage's replicas, an unbatched one goes whole to each.
double microbatch_bytes(const plan::Tensor& tensor, int replicas) {
  auto dtype = ir::parse_dtype(tensor.dtype);
  double bytes = dtype ? ir::dtype_size(*dtype) : 0;
  for (auto dim : tensor.shape) bytes *= static_cast<double>(dim);
  return bytes * replicas;
}

std::string stage_node(const plan::Plan& plan, const plan::Stage& stage) {
  std::vector<std::string> lines{"stage " + std::to_string(stage.id)};
  if (!stage.op_range.empty()) lines.push_back(stage.op_range);
  lines.push_back(std::to_string(stage.replicas_per_pipeline) + " x " + std::to_string(plan.batch.pipelines) + " replicas, ranks " +
                  ranges_text(stage.ranks) + (stage.recompute == plan::Recompute::kNone ? "" : ", recompute " + std::string(plan::recompute_name(stage.recompute))));
  lines.push_back("fwd " + human_ms(stage.predicted.fwd_ms) + ", bwd " + human_ms(stage.predicted.bwd_ms) + " / microbatch");
  lines.push_back(human_bytes(stage.predicted.mem_bytes) + " of " +
                  human_bytes(static_cast<double>(plan.mem_limit_of(stage))) + " per device");
  return "  stage" + std::to_string(stage.id) + " [label=" + dot_label(lines) + "];\n";
}

// One edge per (sender, receiver) pair, listing the tensors it carries.
std::string stage_edges(const plan::Stage& stage) {
  std::map<std::string, std::vector<std::string>> carried;  // sender node -> label lines
  std::map<std::string, double> total;
  for (const auto& input : stage.inputs) {
    std::string from = input.model_input ? dot_quoted("input " + *input.model_input) : "stage" + std::to_string(input.from_stage);
    double bytes = microbatch_bytes(input, stage.replicas_per_pipeline);
    carried[from].push_back(input.name + " (" + human_bytes(bytes) + ")");
    total[from] += bytes;
  }
  std::string edges;
  for (auto& [from, lines] : carried) {
    if (lines.size() > 1) lines.push_back(human_bytes(total[from]) + " / microbatch");
    else lines.back() += " / microbatch";
    edges += "  " + from + " -> stage" + std::to_string(stage.id) + " [label=" + dot_label(lines) + "];\n";
  }
  for (const auto& output : stage.outputs) {
    if (!output.model_output) continue;
    std::string node = dot_quoted("output " + output.name);
    edges += "  " + node + " [shape=ellipse, style=solid, label=" + dot_label({output.name, shape_text(output) + " per replica"}) + "];\n";
    edges += "  stage" + std::to_string(stage.id) + " -> " + node + " [label=" +
             dot_label({human_bytes(microbatch_bytes(output, stage.replicas_per_pipeline)) + " / microbatch"}) + "];\n";
  }
  return edges;
}

}  // namespace

std::string schedule_svg(const partition::PlacedPipeline& plan, const std::string& title) {
  double span = std::max(plan.simulation.iteration_ms, 1e-6);
  Layout layout;
  layout.ms_scale = Layout::kWidth / span;
  bool fold = plan.ranks.size() > kMaxRankRows;
  bool merge = plan.simulation.tasks.size() > kMaxBoxes;
  auto tasks = tasks_by_group(plan);
  std::size_t rows = fold ? tasks.size() : plan.ranks.size();
  double rows_bottom = Layout::kTop + Layout::kRowPitch * static_cast<double>(rows);
  double height = rows_bottom + 44 + (!plan.unused_ranks.empty() ? 20 : 0);
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fixed(Layout::kLeft + Layout::kWidth + Layout::kRight, 0)
      << "\" height=\"" << fixed(height, 0) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<style>.grid { stroke: #ddd; } .task { stroke: #fff; stroke-width: 0.5; } .mb { fill: #fff; font-size: 9px; text-anchor: middle; }</style>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
      << "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" << xml_escaped(title) << "</text>\n"
      << legend() << time_axis(span, rows_bottom, layout);
  if (fold) out << stage_rows(plan, tasks, layout, merge);
  else out << stage_timelines(tasks, layout, merge) << rank_rows(plan);
  if (!plan.unused_ranks.empty()) {
    out << "<text x=\"10\" y=\"" << fixed(rows_bottom + 58) << "\">unused devices " << ranges_text(plan.unused_ranks) << ": "
        << xml_escaped(plan.unused_reason) << "</text>\n";
  }
  out << "</svg>\n";
  return out.str();
}

std::string plan_title(const plan::Plan& plan) {
  return std::filesystem::path(plan.model.path).filename().string() + ": " + std::to_string(plan.stages.size()) +
         " stage(s) x " + std::to_string(plan.batch.pipelines) + " pipeline(s), " + std::to_string(plan.batch.microbatches) +
         " microbatch(es) of " + std::to_string(plan.batch.microbatch_size) + ", " + plan::schedule_label(plan.schedule, plan.interleave) + ", step " +
         human_ms(plan.predicted.iteration_ms);
}

std::string stages_dot(const plan::Plan& plan) {
  std::ostringstream out;
  out << "digraph plan {\n"
      << "  graph [rankdir=LR, labelloc=t, fontname=\"Helvetica\", label=" << dot_quoted(plan_title(plan)) << "];\n"
      << "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#e8eef7\", fontname=\"Helvetica\"];\n"
      << "  edge [fontname=\"Helvetica\", fontsize=10];\n";
  for (const auto& input : plan.model.inputs) {
    out << "  " << dot_quoted("input " + input.name) << " [shape=ellipse, style=solid, label="
        << dot_label({input.name, shape_text(input)}) << "];\n";
  }
  for (const auto& stage : plan.stages) out << stage_node(plan, stage);
  for (const auto& stage : plan.stages) out << stage_edges(stage);
  out << "}\n";
  return out.str();
}

}  // namespace rannc::emit
