// Accelerate's rule for how many times a prepared scheduler advances per scheduler_step call
// (AcceleratedScheduler.step), as a pure function.
#pragma once

namespace accel::optim {

struct SchedulerStepContext {
  bool step_with_optimizer = true;  // Accelerate's step_scheduler_with_optimizer
  bool sync_gradients = true;       // false on accumulation micro-steps
  bool optimizer_skipped = false;   // an fp16 step skipped for inf/nan
  bool split_batches = false;
  int num_processes = 1;
};

// 0 on accumulation micro-steps and after a skipped optimizer step; once with split_batches or
// without step_with_optimizer; otherwise num_processes times.
inline int scheduler_advances(const SchedulerStepContext& c) {
  if (!c.step_with_optimizer) return 1;
  if (!c.sync_gradients || c.optimizer_skipped) return 0;
  return c.split_batches ? 1 : c.num_processes;
}

}  // namespace accel::optim
