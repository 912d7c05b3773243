// A schedule bound to an optimizer: each step sets the learning rate of each of the optimizer's
// parameter groups from the schedule and that group's base rate (and, for one_cycle, every
// group's momentum), as PyTorch's LRScheduler does with its per-group base_lrs.
#pragma once

#include <memory>
#include <vector>

#include "optim/optimizer.hpp"
#include "optim/scheduler.hpp"

namespace accel::optim {

class LrScheduler {
 public:
  // Takes each group's rate as its base rate (also written to the optimizer as the group's
  // initial_lr, which checkpoints keep; no group can be added to the optimizer from now on) and
  // sets each group's rate to the schedule's value at step 0 (as PyTorch does on construction) as
  // soon as the schedule's options are complete.
  LrScheduler(Schedule schedule, std::shared_ptr<Optimizer> optimizer);
  void set(const std::string& key, const std::string& value);
  // One scheduler step; past one_cycle's total_steps it is an error, as in PyTorch.
  void step();
  int64_t steps() const { return steps_; }
  // Group 0's base rate (what checkpoints keep here; the later groups' are the optimizer's
  // initial_lr, restored with the optimizer).
  double base_lr() const { return base_lrs_.front(); }
  double base_lr(size_t group) const { return base_lrs_.at(group); }
  // For load_state, after the optimizer's state: the step count and group 0's base rate saved,
  // the later groups' base rates from the optimizer, and the rates they imply applied.
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
  std::vector<double> base_lrs_;  // one per parameter group
  int64_t steps_ = 0;
};

}  // namespace accel::optim
