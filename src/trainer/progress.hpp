// The Trainer's progress bar on the main process: step, total, the last logged loss, the rate and
// the time left, redrawn in place on standard error at most four times a second. Pure.
#pragma once

#include <cstdio>
#include <optional>

namespace accel::trainer {

class ProgressBar {
 public:
  // `on`: drawn at all; `total`: the run's steps; `first`: the step the run starts from.
  ProgressBar(bool on, long long total, long long first, std::FILE* out = stderr);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(long long step, std::optional<double> loss);
  // Draws the last state and ends the line (once).
  void finish();

 private:
  void draw(long long step);
  bool on_;
  long long total_, first_, step_ = 0, drawn_ = -1;
  std::optional<double> loss_;
  std::FILE* out_;
  double start_, last_draw_ = -1;
};

}  // namespace accel::trainer
