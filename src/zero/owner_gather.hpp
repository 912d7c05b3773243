// Every rank's copy of some parameters becomes their owners' bytes (ZeRO's parameter all-gather):
// after stage 1-2's optimizer step, and when stage 3 gathers a unit. A collective: every rank
// calls it with the same parameters, in the same order.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/communicator.hpp"

namespace accel::zero {

// `owners[k]` is the rank holding the value of `params[k]`; every other rank's tensor (whose
// storage must be there) receives it, bit for bit. The parameters travel in chunks of at most
// `chunk_bytes`, one all-gather per chunk in which each rank gives the bytes of the parameters it
// owns (two chunk-sized buffers: the memory it adds); a larger parameter goes alone, straight from
// its owner's tensor into the others'.
void gather_from_owners(runtime::Communicator& comm, const std::vector<at::Tensor>& params,
                        const std::vector<int>& owners, int64_t chunk_bytes = int64_t{8} << 20);

}  // namespace accel::zero
