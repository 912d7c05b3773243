// Accelerate's find_executable_batch_size (utils/memory.py): run a try at a batch size, and when
// it runs out of memory, again at int(size * 0.9), down to 1. Beyond Accelerate: in a job of
// several processes every rank learns every rank's outcome in one collective after each try, so
// that all go on with the same size (or stop together), and a try that ran out of memory leaves
// the random states, gradients, data positions and accumulation counters as they were before it.
#pragma once

#include <cstdint>
#include <functional>

#include "accelerator/accelerator.hpp"

namespace accel {

// Calls `attempt(size)` from `starting` down; returns the size whose try succeeded on every rank.
// A try fails for memory when it throws accel::Error(out_of_memory), or an error whose message is
// one of Accelerate's out-of-memory statements. Throws: out_of_memory "No executable batch size
// found, reached zero."; a try's other error (on its rank; peer_failed naming it on the others);
// invalid_argument for a negative `starting`.
int64_t find_executable_batch_size(Accelerator& acc, int64_t starting,
                                   const std::function<void(int64_t)>& attempt);

// The size Accelerate tries after `size` ran out of memory.
inline int64_t reduced_batch_size(int64_t size) {
  return static_cast<int64_t>(static_cast<double>(size) * 0.9);
}

}  // namespace accel
