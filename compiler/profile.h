// `rannc-partition profile`: measures each distinct op of a TorchScript model on this machine
// with libtorch, stores the measurements in the profile DB, and reports the predicted training
// step that the measurements give; `--check` also times whole steps of the model to compare.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "compiler/model.h"
#include "compiler/torch_plugin.h"
#include "cost_model/cost_model.h"

namespace rannc {

struct ProfileOptions {
  std::string model_path;
  LoadOptions load;
  std::string db_path;     // empty: measurements are reported, not kept
  int reps = 5;            // timed repetitions per op, after one warm-up
  bool check = false;      // also measure whole training steps
  bool progress = false;   // draw a progress bar on stderr
};

struct ProfileReport {
  std::string model_path;
  std::string device;              // the profile DB's device name: "cpu"
  std::string device_description;
  bool model_loaded = false;       // false when the DB already held everything
  int ops = 0;                     // ops with a cost
  int signatures = 0;              // distinct op signatures among them
  int timed = 0;                   // signatures measured in this run
  std::vector<std::string> unprofiled_kinds;  // kinds of ops that cannot run alone (costed by the roofline)
  int unprofiled_signatures = 0;
  double fwd_ms = 0, bwd_ms = 0, peak_bytes = 0;  // predicted training step
  std::optional<cost::StepTime> passes;           // its device and host sums, when the model was loaded
  std::optional<TorchPlugin::StepMeasurement> measured;
  double seconds = 0;              // wall time of the run
};

ProfileReport run_profile(const ProfileOptions& options);

nlohmann::json profile_report_json(const ProfileReport& report);
std::string profile_report_text(const ProfileReport& report);

}  // namespace rannc
