// What the Trainer's files share: one train() call's counters, the clock, transformers'
// speed_metrics. Internal to src/trainer/trainer*.cpp.
#pragma once

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/args.hpp"
#include "trainer/progress.hpp"
#include "trainer/python_json.hpp"
#include "trainer/trainer.hpp"

namespace accel::trainer {

struct Trainer::Loop {
  Plan plan;
  long long epoch = 0;             // the epoch being run
  long long batch = -1;            // its last batch taken (0-based)
  long long steps_in_epoch = 0;    // its batches
  bool epoch_done = false;         // on_epoch_end ran for `epoch` (a save there)
  bool resumed_mid_epoch = false;  // the loader's cursor is inside `epoch`
  long long window_micro = 0;      // micro-batches of the open accumulation window
  std::optional<double> grad_norm;
  double learning_rate = 0;
  double total_loss = 0;  // transformers' _total_loss_scalar
  double start = 0;
  std::vector<float> rank_sums;  // every rank's open loss window, gathered for a save
  std::unique_ptr<ProgressBar> progress;
};

inline double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// transformers' speed_metrics: the runtime rounded to 4 places, the rates to 3.
inline void add_speed_metrics(Metrics& m, const std::string& prefix, double start, double samples,
                              double steps) {
  const double runtime = seconds_now() - start;
  m[prefix + "_runtime"] = python_round4(runtime);
  m[prefix + "_samples_per_second"] = std::round(samples / runtime * 1000) / 1000;
  m[prefix + "_steps_per_second"] = std::round(steps / runtime * 1000) / 1000;
}

}  // namespace accel::trainer
