#include "optim/lr_scheduler.hpp"

#include <cmath>

#include "common/error.hpp"

namespace accel::optim {

LrScheduler::LrScheduler(Schedule schedule, std::shared_ptr<Optimizer> optimizer)
    : schedule_(std::move(schedule)), optimizer_(std::move(optimizer)) {
  for (size_t g = 0; g < optimizer_->group_count(); ++g) {
    base_lrs_.push_back(optimizer_->group_lr(g));
    optimizer_->set_initial_lr(g, base_lrs_.back());
  }
  try_apply();
}

void LrScheduler::set(const std::string& key, const std::string& value) {
  if (steps_ > 0) fail(Errc::state, "scheduler options are fixed once it has stepped");
  schedule_.set(key, value);
  try_apply();
}

// The first optimizer step must already use the rate at step 0 (0 during a warmup): apply it as
// soon as the options are complete.
void LrScheduler::try_apply() {
  try {
    schedule_.validate();
  } catch (const accel::Error&) {
    return;  // options still missing; step() reports them
  }
  apply();
}

void LrScheduler::apply() {
  schedule_.validate();
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    optimizer_->set_group_lr(g, schedule_.group_lr(steps_, base_lrs_[g], base_lrs_[0]));
  if (auto m = schedule_.momentum_at(steps_); m && optimizer_->has_momentum())
    optimizer_->set_momentum(*m);
}

void LrScheduler::check_restore(int64_t steps, double base_lr) const {
  if (steps < 0) fail(Errc::io, "a saved scheduler step count is negative");
  const int64_t limit = schedule_.max_steps();
  if (limit >= 0 && steps > limit)
    fail(Errc::io, "a saved scheduler step count (" + std::to_string(steps) +
                       ") is beyond the schedule's total_steps (" + std::to_string(limit) + ")");
  if (!std::isfinite(base_lr) || base_lr < 0)
    fail(Errc::io, "a saved base learning rate is not a finite non-negative number");
  schedule_.validate();
  const double lr = schedule_.lr_at(steps, base_lr);
  if (!std::isfinite(lr) || lr < 0)
    fail(Errc::io, "the saved scheduler state gives the learning rate " + std::to_string(lr));
}

void LrScheduler::restore(int64_t steps, double base_lr) {
  check_restore(steps, base_lr);
  steps_ = steps;
  base_lrs_[0] = base_lr;
  optimizer_->set_initial_lr(0, base_lr);
  for (size_t g = 1; g < base_lrs_.size(); ++g)
    base_lrs_[g] = optimizer_->initial_lr(g).value_or(base_lrs_[g]);
  apply();
}

void LrScheduler::step() {
  const int64_t limit = schedule_.max_steps();
  if (limit >= 0 && steps_ + 1 > limit)
    fail(Errc::state, "scheduler " + schedule_.kind() + ": tried to step " +
                          std::to_string(steps_ + 1) + " times; total_steps is " +
                          std::to_string(limit));
  ++steps_;
  apply();
}

}  // namespace accel::optim
