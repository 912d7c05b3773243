// glibc's malloc returns blocks above its mmap threshold to the kernel on free and trims the heap
// top above its trim threshold. Training frees and re-allocates the same activation, gradient and
// optimizer temporaries every step, so with the dynamic defaults a step can fault in megabytes of
// fresh zeroed pages: on the 784-256-256-10 MLP (batch 64, 1 thread) that was ~500 page faults and
// ~40 % of the step time. Raising both thresholds keeps the freed memory for the next step.
#pragma once

#include <string>

#include "config/config.hpp"

namespace accel::runtime {

// The thresholds set by tune_malloc (bytes): the largest block served from the heap, and the free
// heap top kept instead of being returned to the kernel.
inline constexpr long kTensorMmapThreshold = 32L << 20;
inline constexpr long kTensorTrimThreshold = 64L << 20;

// Whether the user already chose malloc's thresholds (MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES naming either); their choice is then left alone.
bool malloc_thresholds_set_by_user(const config::EnvMap& env);

// Sets both thresholds once per process unless the user chose them. Returns what it did, for
// `accel env` and the logs. Without glibc it does nothing.
std::string tune_malloc(const config::EnvMap& env);

}  // namespace accel::runtime
