#include "runtime/malloc_tuning.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

using accel::runtime::malloc_thresholds_set_by_user;
using accel::runtime::tune_malloc;

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// A training step's pattern: several temporaries of different sizes, all freed at the end.
void one_step() {
  std::vector<void*> blocks;
  for (size_t kib : {800, 200, 64, 3000, 800, 1200}) {
    void* p = std::malloc(kib << 10);
    std::memset(p, 1, kib << 10);
    blocks.push_back(p);
  }
  for (void* p : blocks) std::free(p);
}

}  // namespace

TEST(MallocTuning, UserChoiceIsLeftAlone) {
  EXPECT_FALSE(malloc_thresholds_set_by_user({{"HOME", "/root"}}));
  EXPECT_TRUE(malloc_thresholds_set_by_user({{"MALLOC_TRIM_THRESHOLD_", "0"}}));
  EXPECT_TRUE(malloc_thresholds_set_by_user({{"MALLOC_MMAP_THRESHOLD_", "4096"}}));
  EXPECT_TRUE(malloc_thresholds_set_by_user({{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1"}}));
  EXPECT_FALSE(malloc_thresholds_set_by_user({{"GLIBC_TUNABLES", "glibc.malloc.arena_max=2"}}));
  EXPECT_EQ(tune_malloc({{"MALLOC_TRIM_THRESHOLD_", "0"}}), "left as the environment sets it");
}

// The point of the tuning: after the first step, steps reuse freed memory instead of faulting in
// fresh pages (without it, glibc returns the blocks above its threshold to the kernel).
TEST(MallocTuning, FreedStepMemoryIsReused) {
#if defined(__GLIBC__)
  if (malloc_thresholds_set_by_user(accel::config::process_environment()))
    GTEST_SKIP() << "malloc thresholds set in this environment";
  EXPECT_EQ(tune_malloc({}), "mmap threshold 32 MiB, trim threshold 64 MiB");
  one_step();
  const long before = minor_faults();
  for (int i = 0; i < 20; ++i) one_step();
  // One step touches ~1500 pages; reused memory faults (almost) none of them again.
  EXPECT_LT(minor_faults() - before, 200);
#else
  GTEST_SKIP() << "not glibc";
#endif
}
