// Learning-rate schedules with the formulas of PyTorch (StepLR, ExponentialLR, OneCycleLR) and of
// the Hugging Face schedules of the same names (constant, constant_with_warmup, linear, cosine,
// cosine_with_restarts, polynomial). Pure C++: the optimizer is told the rate, not owned.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace accel::optim {

class Schedule {
 public:
  // Throws accel::Error(invalid_argument) for an unknown kind.
  explicit Schedule(const std::string& kind);

  // Options by key: warmup_steps, total_steps, num_cycles, lr_end, power, step_size, gamma, max_lr,
  // pct_start, anneal_strategy (0 cos, 1 linear), div_factor, final_div_factor, base_momentum,
  // max_momentum, cycle_momentum.
  void set(const std::string& key, const std::string& value);
  // Checks that the options the kind needs are present (total_steps for linear, ...).
  void validate() const;

  // The learning rate after `step` scheduler steps, for an optimizer whose initial rate is base_lr.
  double lr_at(int64_t step, double base_lr) const;
  // The learning rate after `step` steps of a parameter group whose base rate is `base_lr`, when
  // group 0's is `first_base_lr` (PyTorch's LRScheduler with per-group base_lrs): base_lr times
  // the schedule's factor for the Hugging Face schedules (LambdaLR; polynomial's factor is that of
  // group 0's rate, as transformers' is that of the optimizer's lr), step and exponential; for
  // one_cycle, whose max_lr is one number, every group's rate is the same.
  double group_lr(int64_t step, double base_lr, double first_base_lr) const;
  // The momentum one_cycle sets at `step` (none for other kinds, or with cycle_momentum off).
  std::optional<double> momentum_at(int64_t step) const;
  // one_cycle cannot step past total_steps; others have no limit (-1).
  int64_t max_steps() const;
  const std::string& kind() const { return kind_; }

 private:
  double get(const std::string& key) const;
  std::string kind_;
  std::map<std::string, double> options_;
};

}  // namespace accel::optim
