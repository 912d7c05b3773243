// Which rank owns each parameter under ZeRO stage 1 (optimizer state sharded): whole parameters,
// as PyTorch's ZeroRedundancyOptimizer assigns them. Pure C++, no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::zero {

// The owner rank of each parameter (given its size in bytes): largest first (ties by index), each
// to the rank that owns the fewest bytes so far (ties to the lowest rank). Every rank computes the
// same answer from the same sizes. A rank may own nothing when there are fewer parameters than
// ranks.
std::vector<int> assign_owners(const std::vector<int64_t>& bytes, int world);

}  // namespace accel::zero
