#include "emit/launch_files.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "support/format.h"

namespace rannc::emit {
namespace {

// Only these characters reach the scripts from the plan, so no model name can break the
// shell's parsing (or SLURM's).
std::string shell_safe(const std::string& text) {
  std::string safe;
  for (char c : text) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    safe += plain ? c : '_';
  }
  return safe.empty() ? "model" : safe;
}

// Sets $rannc_run as the header of launch_files.h says, or exits 2 naming `script`.
std::string find_runtime(const std::string& script, const std::string& runtime_folder) {
  std::ostringstream out;
  out << "rannc_run=\"${RANNC_RUN:-}\"\n";
  if (!runtime_folder.empty()) {
    std::string beside = shell_quoted((std::filesystem::path(runtime_folder) / "rannc-run").string());
    out << "if [[ -z \"$rannc_run\" && -x " << beside << " ]]; then rannc_run=" << beside << "; fi\n";
  }
  out << "if [[ -z \"$rannc_run\" ]]; then rannc_run=\"$(command -v rannc-run || true)\"; fi\n"
      << "if [[ -z \"$rannc_run\" ]]; then\n"
      << "  echo \"" << script << ": cannot find rannc-run (set RANNC_RUN, or put it on PATH)\" >&2\n"
      << "  exit 2\n"
      << "fi\n";
  return out.str();
}

// Ranks fill nodes in order (rank r is local rank r % K of node r / K).
int used_nodes(const plan::Plan& plan) { return (launched_ranks(plan) + plan.cluster.gpus_per_node - 1) / plan.cluster.gpus_per_node; }
int ranks_per_node(const plan::Plan& plan) { return std::min(launched_ranks(plan), plan.cluster.gpus_per_node); }

// What both scripts say about the job in their header comment.
std::string job_comment(const plan::Plan& plan) {
  std::ostringstream out;
  out << "# " << shell_safe(std::filesystem::path(plan.model.path).filename().string()) << ": "
      << plural(static_cast<int>(plan.stages.size()), "stage") << " x " << plural(plan.batch.pipelines, "pipeline") << " = "
      << plural(launched_ranks(plan), "rank") << " on " << plural(used_nodes(plan), "node") << " of "
      << plan.cluster.gpus_per_node << " " << shell_safe(plan.cluster.device) << "\n";
  if (!plan.unused.ranks.empty())
    out << "# " << plural(static_cast<int>(plan.unused.ranks.size()), "device") << " of the cluster ("
        << ranges_text(plan.unused.ranks) << ") " << (plan.unused.ranks.size() == 1 ? "carries" : "carry")
        << " no stage and get" << (plan.unused.ranks.size() == 1 ? "s" : "") << " no rank.\n";
  return out.str();
}

}  // namespace

int launched_ranks(const plan::Plan& plan) { return static_cast<int>(plan.ranks.size()); }

std::string launch_script(const plan::Plan& plan, const std::string& runtime_folder) {
  std::ostringstream out;
  out << "#!/usr/bin/env bash\n"
      << "# Runs the plan beside this script under MPI, from any working directory.\n"
      << job_comment(plan)
      << "# usage: launch.sh [rannc-run options: --steps N --data DIR --report FILE ...]\n"
      << "# MPIRUN (default mpirun, e.g. \"mpirun --hostfile hosts\" across nodes) overrides the launcher;\n"
      << "# rannc-run is $RANNC_RUN, else the one beside the rannc-partition that wrote the plan, else on PATH.\n"
      << "set -euo pipefail\n"
      << "here=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n"
      << find_runtime("launch.sh", runtime_folder)
      << "exec ${MPIRUN:-mpirun} -np " << launched_ranks(plan) << " \"$rannc_run\" \"$here/plan.json\" \"$@\"\n";
  return out.str();
}

std::string sbatch_script(const plan::Plan& plan, const std::string& runtime_folder) {
  const int ranks = launched_ranks(plan);
  std::ostringstream out;
  out << "#!/usr/bin/env bash\n"
      << "#SBATCH --job-name=rannc-" << shell_safe(std::filesystem::path(plan.model.path).stem().string()) << "\n"
      << "#SBATCH --nodes=" << used_nodes(plan) << "\n"
      << "#SBATCH --ntasks=" << ranks << "\n"
      << "#SBATCH --ntasks-per-node=" << ranks_per_node(plan) << "\n"
      << "#SBATCH --gpus-per-node=" << ranks_per_node(plan) << "\n"
      << "# Your cluster's limits: fill these in and remove one '#' (or give them to sbatch:\n"
      << "# sbatch --time=2:00:00 --partition=gpu --account=proj job.sbatch).\n"
      << "##SBATCH --time=HH:MM:SS\n"
      << "##SBATCH --partition=PARTITION\n"
      << "##SBATCH --account=ACCOUNT\n"
      << "# A SLURM job of the plan in this folder, one task per rank and one GPU per task.\n"
      << job_comment(plan)
      << "# usage: cd OUT && sbatch job.sbatch [rannc-run options]; RANNC_PLAN overrides the plan.\n"
      << "# The ranks start by srun --mpi=pmix (OpenMPI built with PMIx), or by mpirun with\n"
      << "# RANNC_LAUNCHER=mpirun (RANNC_LAUNCHER=mpirun sbatch job.sbatch).\n"
      << "# rannc-run is $RANNC_RUN, else the one beside the rannc-partition that wrote the plan, else on PATH.\n"
      << "set -euo pipefail\n"
      << "launcher=\"${RANNC_LAUNCHER:-srun}\"\n"
      << "if [[ \"$launcher\" != srun && \"$launcher\" != mpirun ]]; then\n"
      << "  echo \"job.sbatch: RANNC_LAUNCHER=$launcher: must be srun (the default) or mpirun\" >&2\n"
      << "  exit 2\n"
      << "fi\n"
      << "# sbatch runs a copy of this script from its spool folder, so the plan is looked for in\n"
      << "# the folder the job was submitted from.\n"
      << "plan=\"${RANNC_PLAN:-${SLURM_SUBMIT_DIR:-$PWD}/plan.json}\"\n"
      << "if [[ ! -f \"$plan\" ]]; then\n"
      << "  echo \"job.sbatch: $plan not found: submit from the plan's folder or set RANNC_PLAN\" >&2\n"
      << "  exit 2\n"
      << "fi\n"
      << find_runtime("job.sbatch", runtime_folder)
      << "if [[ \"$launcher\" == mpirun ]]; then\n"
      << "  exec mpirun -np " << ranks << " \"$rannc_run\" \"$plan\" \"$@\"\n"
      << "fi\n"
      << "exec srun --mpi=pmix --ntasks=" << ranks << " \"$rannc_run\" \"$plan\" \"$@\"\n";
  return out.str();
}

}  // namespace rannc::emit
