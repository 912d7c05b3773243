// A schedule bound to an optimizer: each step sets the optimizer's learning rate (and, for
// one_cycle, its momentum) from the schedule, as PyTorch's LRScheduler does.
#pragma once

#include <memory>

#include "optim/optimizer.hpp"
#include "optim/scheduler.hpp"

namespace accel::optim {

class LrScheduler {
 public:
  // Sets the optimizer's rate to the schedule's value at step 0 (as PyTorch does on construction)
  // as soon as the schedule's options are complete.
  LrScheduler(Schedule schedule, std::shared_ptr<Optimizer> optimizer);
  void set(const std::string& key, const std::string& value);
  // One scheduler step; past one_cycle's total_steps it is an error, as in PyTorch.
  void step();
  int64_t steps() const { return steps_; }
  double base_lr() const { return base_lr_; }
  // For load_state: the step count and base rate saved, and the rate they imply applied.
  void restore(int64_t steps, double base_lr);
  // Throws accel::Error(io) unless restore(steps, base_lr) would succeed: a step count from 0 to
  // the schedule's total and a finite, non-negative rate that gives a valid rate at that step.
  void check_restore(int64_t steps, double base_lr) const;
  double lr() const { return optimizer_->lr(); }
  const Schedule& schedule() const { return schedule_; }
  const std::shared_ptr<Optimizer>& optimizer() const { return optimizer_; }

 private:
  void apply();
  void try_apply();
  Schedule schedule_;
  std::shared_ptr<Optimizer> optimizer_;
  double base_lr_;
  int64_t steps_ = 0;
};

}  // namespace accel::optim
