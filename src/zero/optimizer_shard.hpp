// ZeRO stage 1 for one optimizer: each rank steps only the parameters it owns (so it holds only
// their optimizer state), then every rank takes each parameter's new value from its owner, bit for
// bit. The gradients stay averaged on every rank (stage 0's bucket views), so clipping, the fp16
// scaler's inf check and accumulation see what they see without sharding.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "runtime/communicator.hpp"

namespace accel::zero {

class OptimizerShard {
 public:
  // Owners from the parameters' sizes (assign_owners): the same on every rank.
  OptimizerShard(runtime::Communicator& comm, std::vector<at::Tensor> params);

  const std::vector<bool>& owned() const { return owned_; }

  const std::vector<int>& owners() const { return owner_; }

  // After the owners stepped: every parameter (or each one `which` selects, the same on every
  // rank) everywhere holds its owner's bytes (see gather_from_owners). A collective: every rank
  // calls it after every optimizer step, in order.
  void gather_parameters(const std::function<bool(const at::Tensor&)>& which = {},
                         int64_t chunk_bytes = int64_t{8} << 20);

 private:
  runtime::Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<int> owner_;
  std::vector<bool> owned_;
};

}  // namespace accel::zero
