// What `rannc-run` is asked to do (docs/contract.md, "rannc-run").
#pragma once

#include <cstdint>
#include <string>

#include "plan/options.h"

namespace rannc::runtime {

struct RunOptions {
  std::string plan_path;
  int steps = 10;            // optimizer steps
  int accumulate_steps = 1;  // global batches whose gradients add up in each optimizer step
  std::string data_dir;     // empty: random inputs from `seed`
  bool shuffle = false;     // take --data's rows in an order drawn per epoch from `seed`
  std::string loss;         // "", "cross_entropy" or "mse"
  std::string optimizer;    // empty: the plan's
  double lr = 0.01;
  std::string lr_schedule = "constant";  // constant, linear or cosine decay to 0 at the last step
  int warmup_steps = 0;                  // linear warm-up from 0 over this many steps
  double weight_decay = 0;               // AdamW's for adam, L2 for sgd and momentum
  double clip_grad_norm = 0;             // clip the global gradient norm to this; 0: off
  std::uint64_t seed = 0;
  std::string report_path;  // empty: no report
  std::string log_path;     // empty: no log; else a JSON line per step, written as training goes
  int timeout_s = 300;      // how long a rank waits on a peer before giving up
  std::string save_dir;      // empty: no checkpoints; else one every save_every steps and after the last
  int save_every = 0;        // 0: only after the last step
  std::string resume_dir;    // a checkpoint (or a --save folder) to continue from
  std::string init_path;     // a PyTorch state_dict to start from
  std::int64_t bucket_kib = plan::kGradientBucketBytes / 1024;  // gradient bucket of sharded state
  std::string device;  // auto, cuda or cpu (device_choice.h); empty: $RANNC_DEVICE, else auto
};

}  // namespace rannc::runtime
