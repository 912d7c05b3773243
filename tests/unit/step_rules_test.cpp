// How often a prepared scheduler advances per scheduler_step call, as an explicit table of what
// Hugging Face Accelerate does. Every expected value below is a literal read off Accelerate's code,
// never computed from a rule, so a wrong rule in step_rules.hpp fails here.
//
// Source: huggingface/accelerate, src/accelerate/scheduler.py, AcceleratedScheduler.step (same
// logic at commits 099bfe06, e4620984 and 16cb6eb8), with the inputs it reads:
//   - step_with_optimizer: Accelerator(step_scheduler_with_optimizer=...), passed by
//     Accelerator.prepare_scheduler (src/accelerate/accelerator.py), default True;
//   - sync_gradients: GradientState.sync_gradients (src/accelerate/state.py), False on gradient
//     accumulation micro-steps;
//   - optimizer_skipped: AcceleratedOptimizer.step_was_skipped (src/accelerate/optimizer.py), True
//     when the fp16 GradScaler skipped the last synced step for inf/nan;
//   - split_batches: Accelerator(split_batches=...), passed by prepare_scheduler;
//   - num_processes: AcceleratorState.num_processes, all processes of the job.
//
// The rule, in words: without step_with_optimizer the wrapped scheduler is stepped exactly once,
// and nothing else is looked at (not sync_gradients, not the optimizers, not the process count).
// With it, a call on an accumulation micro-step (sync_gradients false) steps nothing; then, if
// any of the scheduler's optimizers reports step_was_skipped, nothing; then once with
// split_batches, else once per process (num_processes times).
//
// Not in this table, because scheduler_advances does not model them (they are noted for the
// callers, src/prepare/session.cpp):
//   - the OneCycleLR guard: in the once-per-process loop only (not on the split_batches path),
//     Accelerate skips the step() of a scheduler that has a total_steps attribute once its
//     _step_count exceeds total_steps;
//   - GradientAccumulationPlugin(adjust_scheduler=True), at e4620984 and 16cb6eb8: on a micro-step
//     Accelerate bumps the scheduler's _step_count without calling step() (libaccel has no such
//     option);
//   - which optimizers are asked: the one whose torch optimizer the scheduler was built on when it
//     is among the prepared ones, else all prepared optimizers; any of them skipped means 0.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "optim/step_rules.hpp"

using accel::optim::scheduler_advances;
using accel::optim::SchedulerStepContext;

namespace {

struct Row {
  bool step_with_optimizer;
  bool sync_gradients;
  bool optimizer_skipped;
  bool split_batches;
  int num_processes;
  int accelerate_steps;  // scheduler.step() calls AcceleratedScheduler.step makes
};

// clang-format off
constexpr Row kAccelerate[] = {
  // step_with_optimizer=False: one step, whatever the rest says.
  {false, false, false, false, 1, 1},
  {false, false, false, false, 2, 1},
  {false, false, false, false, 8, 1},
  {false, false, false, true,  1, 1},
  {false, false, false, true,  2, 1},
  {false, false, false, true,  8, 1},
  {false, false, true,  false, 1, 1},
  {false, false, true,  false, 2, 1},
  {false, false, true,  false, 8, 1},
  {false, false, true,  true,  1, 1},
  {false, false, true,  true,  2, 1},
  {false, false, true,  true,  8, 1},
  {false, true,  false, false, 1, 1},
  {false, true,  false, false, 2, 1},
  {false, true,  false, false, 8, 1},
  {false, true,  false, true,  1, 1},
  {false, true,  false, true,  2, 1},
  {false, true,  false, true,  8, 1},
  {false, true,  true,  false, 1, 1},
  {false, true,  true,  false, 2, 1},
  {false, true,  true,  false, 8, 1},
  {false, true,  true,  true,  1, 1},
  {false, true,  true,  true,  2, 1},
  {false, true,  true,  true,  8, 1},
  // step_with_optimizer=True, accumulation micro-step: nothing, skipped or not.
  {true,  false, false, false, 1, 0},
  {true,  false, false, false, 2, 0},
  {true,  false, false, false, 8, 0},
  {true,  false, false, true,  1, 0},
  {true,  false, false, true,  2, 0},
  {true,  false, false, true,  8, 0},
  {true,  false, true,  false, 1, 0},
  {true,  false, true,  false, 2, 0},
  {true,  false, true,  false, 8, 0},
  {true,  false, true,  true,  1, 0},
  {true,  false, true,  true,  2, 0},
  {true,  false, true,  true,  8, 0},
  // step_with_optimizer=True, synced step, an optimizer skipped its step: nothing.
  {true,  true,  true,  false, 1, 0},
  {true,  true,  true,  false, 2, 0},
  {true,  true,  true,  false, 8, 0},
  {true,  true,  true,  true,  1, 0},
  {true,  true,  true,  true,  2, 0},
  {true,  true,  true,  true,  8, 0},
  // step_with_optimizer=True, synced step, no skip, split batches: once.
  {true,  true,  false, true,  1, 1},
  {true,  true,  false, true,  2, 1},
  {true,  true,  false, true,  8, 1},
  // step_with_optimizer=True, synced step, no skip, batches not split: once per process.
  {true,  true,  false, false, 1, 1},
  {true,  true,  false, false, 2, 2},
  {true,  true,  false, false, 8, 8},
};
// clang-format on

}  // namespace

TEST(StepRules, MatchesAccelerateTable) {
  for (const Row& r : kAccelerate) {
    SchedulerStepContext c;
    c.step_with_optimizer = r.step_with_optimizer;
    c.sync_gradients = r.sync_gradients;
    c.optimizer_skipped = r.optimizer_skipped;
    c.split_batches = r.split_batches;
    c.num_processes = r.num_processes;
    EXPECT_EQ(scheduler_advances(c), r.accelerate_steps)
        << "step_with_optimizer=" << r.step_with_optimizer << " sync_gradients=" << r.sync_gradients
        << " optimizer_skipped=" << r.optimizer_skipped << " split_batches=" << r.split_batches
        << " num_processes=" << r.num_processes;
  }
}

// The table is complete: every combination of the four flags for 1, 2 and 8 processes, once.
TEST(StepRules, AccelerateTableCoversEveryCombination) {
  std::set<std::tuple<bool, bool, bool, bool, int>> seen;
  for (const Row& r : kAccelerate) {
    EXPECT_TRUE(seen.insert({r.step_with_optimizer, r.sync_gradients, r.optimizer_skipped,
                             r.split_batches, r.num_processes})
                    .second)
        << "duplicate row";
    EXPECT_TRUE(r.num_processes == 1 || r.num_processes == 2 || r.num_processes == 8);
  }
  EXPECT_EQ(seen.size(), 2u * 2 * 2 * 2 * 3);
}
