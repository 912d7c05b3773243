// How often a prepared scheduler advances, for every combination, against Accelerate's
// AcceleratedScheduler.step as its documentation and code describe it.
#include <gtest/gtest.h>

#include "optim/step_rules.hpp"

using accel::optim::scheduler_advances;
using accel::optim::SchedulerStepContext;

TEST(StepRules, EveryCombination) {
  for (int with = 0; with < 2; ++with)
    for (int sync = 0; sync < 2; ++sync)
      for (int skipped = 0; skipped < 2; ++skipped)
        for (int split = 0; split < 2; ++split)
          for (int procs = 1; procs <= 4; ++procs) {
            SchedulerStepContext c{with == 1, sync == 1, skipped == 1, split == 1, procs};
            int want;
            if (!with)
              want = 1;  // the program controls the timing entirely
            else if (!sync || skipped)
              want = 0;  // accumulation micro-step, or fp16 step skipped for inf/nan
            else
              want = split ? 1 : procs;
            EXPECT_EQ(scheduler_advances(c), want)
                << with << sync << skipped << split << " procs " << procs;
          }
}
