#include "compiler/sweep.h"

#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "cost_model/cost_model.h"
#include "compiler/cpu_calibration.h"
#include "cost_model/profile_db.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/format.h"
#include "support/input_file.h"
#include "plan/plan_json.h"

namespace rannc {
namespace {

// One device count's plan, or why there is none.
struct SweepRow {
  int devices = 0;
  std::string device;  // a mix's rows: the kinds planned ("a100-40g", "a100-40g+h100-80g"); "" otherwise
  std::optional<partition::PlacedPipeline> pipeline;
  std::string refusal;  // the planner's "cannot meet" line when there is no plan
};

// "1/1/4", or "8 each" when every stage has the same count.
std::string replica_text(const partition::PlacedPipeline& p, bool fold) {
  std::string text;
  bool same = true;
  for (const auto& stage : p.stages) {
    same = same && stage.option.replicas == p.stages.front().option.replicas;
    text += (text.empty() ? "" : "/") + std::to_string(stage.option.replicas);
  }
  return fold && same && p.stages.size() > 1 ? std::to_string(p.stages.front().option.replicas) + " each" : text;
}

// "8", "8/8/4" per stage, or "" when no stage splits its layers.
std::string tensor_text(const partition::PlacedPipeline& p) {
  std::string text;
  bool split = false, same = true;
  for (const auto& stage : p.stages) {
    split = split || stage.option.tensor_degree > 1;
    same = same && stage.option.tensor_degree == p.stages.front().option.tensor_degree;
    text += (text.empty() ? "" : "/") + std::to_string(stage.option.tensor_degree);
  }
  if (!split) return "";
  return same ? std::to_string(p.stages.front().option.tensor_degree) : text;
}

nlohmann::json row_json(const SweepRow& row) {
  nlohmann::json entry = {{"devices", row.devices}};
  if (!row.device.empty()) entry["device"] = row.device;
  if (!row.pipeline) {
    entry["fits"] = false;
    entry["reason"] = row.refusal;
    return entry;
  }
  const auto& p = *row.pipeline;
  entry.update(plan::prediction_to_json(p.predicted));  // as plan.json writes it
  entry.update({{"fits", true},
                {"stages", p.stages.size()},
                {"pipelines", p.config.pipelines},
                {"replicas_per_pipeline", replica_text(p, /*fold=*/false)},
                {"microbatches", p.config.microbatches},
                {"unused_devices", p.unused_ranks.size()}});
  if (auto tensor = tensor_text(p); !tensor.empty()) entry["tensor_parallel"] = tensor;
  if (p.config.context_degree > 1) entry["context_parallel"] = p.config.context_degree;
  if (p.config.chunks > 1) entry["interleave"] = p.config.chunks;
  return entry;
}

// "16", or a mix's "16 x a100-40g".
std::string devices_label(const SweepRow& row) {
  return std::to_string(row.devices) + (row.device.empty() ? "" : " x " + row.device);
}

std::string table_text(const std::vector<SweepRow>& rows, std::int64_t mem_limit) {
  std::ostringstream out;
  char line[512];
  int width = 8;
  for (const auto& row : rows) width = std::max(width, static_cast<int>(devices_label(row).size()));
  std::snprintf(line, sizeof line, "%*s  %-36s %6s %12s %12s %7s  %s\n", width, "devices", "layout (replicas per stage)",
                "micro", "samples/s", "TFLOP/s/dev", "peak", "memory per device");
  out << line;
  for (const auto& row : rows) {
    const std::string label = devices_label(row);
    if (!row.pipeline) {
      std::snprintf(line, sizeof line, "%*s  does not fit: ", width, label.c_str());
      out << line << row.refusal << "\n";
      continue;
    }
    const auto& p = *row.pipeline;
    std::string tensor = tensor_text(p);
    std::string layout = std::to_string(p.stages.size()) + " x " + std::to_string(p.config.pipelines) + " (" +
                         replica_text(p, /*fold=*/true) + (tensor.empty() ? "" : ", tp " + tensor) +
                         (p.config.context_degree > 1 ? ", cp " + std::to_string(p.config.context_degree) : "") +
                         (p.config.chunks > 1 ? ", vp " + std::to_string(p.config.chunks) : "") + ")";
    if (layout.size() > 36) layout = layout.substr(0, 33) + "...";
    std::string memory = human_bytes(p.predicted.peak_mem_bytes) + (row.device.empty() ? " of " + human_bytes(static_cast<double>(mem_limit)) : "");
    std::snprintf(line, sizeof line, "%*s  %-36s %6d %12.1f %12.1f %6.0f%%  %s\n", width, label.c_str(), layout.c_str(),
                  p.config.microbatches, p.predicted.samples_per_s, p.predicted.model_tflops_per_device,
                  100 * p.predicted.peak_fraction, memory.c_str());
    out << line;
  }
  return out.str();
}

std::string csv_text(const nlohmann::json& rows) {
  std::vector<const char*> columns{"devices", "fits", "stages", "pipelines", "replicas_per_pipeline", "microbatches",
                                   "unused_devices", "iteration_ms", "samples_per_s", "model_tflops_per_device",
                                   "peak_fraction", "peak_mem_bytes", "tensor_parallel"};
  if (!rows.empty() && rows.front().contains("device")) columns.push_back("device");
  std::string text;
  for (const char* column : columns) text += std::string(text.empty() ? "" : ",") + column;
  text += "\n";
  for (const auto& row : rows) {
    std::string line;
    for (const char* column : columns) {
      std::string cell;
      if (row.contains(column)) cell = row[column].is_string() ? row[column].get<std::string>() : row[column].dump();
      line += std::string(line.empty() ? "" : ",") + cell;
    }
    text += line + "\n";
  }
  return text;
}

int parse_device_count(const std::string& text) {
  int count = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw InputError("--gpus " + text_excerpt(text) + ": not a device count (e.g. 8,16,32, or a mix such as a100-40g:16,h100-80g:16)");
  return count;
}

// The requests of --gpus: one per device count; for a mix, one per kind (its nodes alone) and one
// of the mix.
std::vector<partition::PlanRequest> sweep_requests(const SweepOptions& options) {
  const bool mix = options.gpus.front().find(':') != std::string::npos;
  std::vector<partition::PlanRequest> requests;
  if (!mix) {
    for (const auto& text : options.gpus) {
      if (text.find(':') != std::string::npos)
        throw InputError("--gpus " + text_excerpt(text) + ": either device counts or one mix of PRESET:DEVICES, not both");
      PartitionOptions one = options.partition;
      one.cluster.gpus = parse_device_count(text);
      requests.push_back(plan_request(one));
    }
    return requests;
  }
  PartitionOptions mixed = options.partition;
  for (const auto& text : options.gpus) {
    if (text.find(':') == std::string::npos)
      throw InputError("--gpus " + text_excerpt(text) + ": either device counts or one mix of PRESET:DEVICES, not both");
    mixed.cluster.mix.push_back(cost::parse_mix_entry(text, "--gpus"));
  }
  partition::PlanRequest whole = plan_request(mixed);
  for (int kind = 0; kind < whole.cluster.kinds(); ++kind) {
    partition::PlanRequest alone = whole;
    alone.cluster = whole.cluster.kind_view(kind);
    requests.push_back(alone);
  }
  requests.push_back(whole);
  return requests;
}

}  // namespace

SweepReport run_sweep(const SweepOptions& options) {
  if (options.partition.cluster.cluster_file)
    throw InputError("sweep: --cluster fixes the device count; give --device, --mem and --gpus-per-node instead");
  if (options.gpus.empty()) throw InputError("sweep: --gpus takes the device counts to plan, e.g. 8,16,32");
  // Every request, and the CSV's folder, is checked before the model is read.
  if (!options.csv_path.empty()) check_can_write(options.csv_path, "--csv");
  std::vector<partition::PlanRequest> requests = sweep_requests(options);
  std::optional<cost::ProfileDb> db;
  if (!options.partition.profile_db.empty()) db = cost::ProfileDb::load(options.partition.profile_db, /*must_exist=*/true);
  Model model = load_model(options.partition.model_path, options.partition.load);
  const Progress& progress = options.partition.progress;
  progress.done("loaded " + options.partition.model_path + ": " + plural(static_cast<std::int64_t>(model.graph.ops().size()), "op"));
  for (auto& request : requests) {
    request.cluster.device = with_this_cpu(request.cluster.device, db ? &*db : nullptr);
    for (auto& group : request.cluster.groups) group.device = with_this_cpu(group.device, db ? &*db : nullptr);
  }
  const auto& first = requests.front();
  // A cost model per device kind, shared by the rows.
  std::map<std::string, cost::CostModel> models;
  auto costs_of = [&](const cost::Cluster& cluster) {
    std::vector<const cost::CostModel*> costs;
    for (int kind = 0; kind < cluster.kinds(); ++kind) {
      const cost::DeviceSpec& device = cluster.kind_view(kind).device;
      auto it = models.find(device.name);
      if (it == models.end()) it = models.emplace(device.name, cost::CostModel(model.graph, device, first.precision, db ? &*db : nullptr)).first;
      costs.push_back(&it->second);
    }
    return costs;
  };

  std::vector<SweepRow> rows;
  const bool mix = first.cluster.mixed() || requests.back().cluster.mixed();
  for (auto& request : requests) {
    set_model_batch(request, options.partition, model);
    SweepRow row{request.cluster.gpus(), mix ? request.cluster.device_names() : "", std::nullopt, ""};
    try {
      row.pipeline = partition::plan_model(model.graph, model.batch, costs_of(request.cluster), request).pipeline;
    } catch (const Error& e) {
      if (e.status() != ExitStatus::kCannotMeet) throw;
      row.refusal = e.what();
    }
    progress.done("planned " + (row.device.empty() ? plural(row.devices, "device") : devices_label(row)) +
                  (row.pipeline ? "" : ": no plan fits"));
    rows.push_back(std::move(row));
  }
  SweepReport report;
  report.rows = nlohmann::json::array();
  for (const auto& row : rows) report.rows.push_back(row_json(row));
  report.text = table_text(rows, first.cluster.mem_bytes);
  if (!options.csv_path.empty()) write_file_atomically(options.csv_path, csv_text(report.rows), "the sweep CSV");
  return report;
}

}  // namespace rannc
