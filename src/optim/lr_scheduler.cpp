#include "optim/lr_scheduler.hpp"

#include "common/error.hpp"

namespace accel::optim {

LrScheduler::LrScheduler(Schedule schedule, std::shared_ptr<Optimizer> optimizer)
    : schedule_(std::move(schedule)), optimizer_(std::move(optimizer)), base_lr_(optimizer_->lr()) {
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
  optimizer_->set_lr(schedule_.lr_at(steps_, base_lr_));
  if (auto m = schedule_.momentum_at(steps_); m && optimizer_->has_momentum())
    optimizer_->set_momentum(*m);
}

void LrScheduler::restore(int64_t steps, double base_lr) {
  if (steps < 0) fail(Errc::io, "a saved scheduler step count is negative");
  steps_ = steps;
  base_lr_ = base_lr;
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
