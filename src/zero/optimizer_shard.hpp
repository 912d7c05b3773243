// ZeRO stage 1 for one optimizer: each rank steps only the parameters it owns (so it holds only
// their optimizer state), then every rank takes each parameter's new value from its owner, bit for
// bit. The gradients stay averaged on every rank (stage 0's bucket views), so clipping, the fp16
// scaler's inf check and accumulation see what they see without sharding.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/communicator.hpp"

namespace accel::zero {

class OptimizerShard {
 public:
  // Owners from the parameters' sizes (assign_owners): the same on every rank.
  OptimizerShard(runtime::Communicator& comm, std::vector<at::Tensor> params);

  const std::vector<bool>& owned() const { return owned_; }

  // After the owners stepped: every parameter everywhere holds its owner's bytes. A collective:
  // every rank calls it after every optimizer step, in the same order. The parameters travel in
  // chunks of at most `chunk_bytes` of parameters, as one all-gather per chunk in which each rank
  // gives the bytes of the parameters it owns (two chunk-sized buffers: the memory it adds); a
  // larger parameter goes alone, straight from its owner's tensor into the others'.
  void gather_parameters(int64_t chunk_bytes = int64_t{8} << 20);

 private:
  void exchange_chunk(at::Tensor& mine, at::Tensor& all, size_t first, size_t last);

  runtime::Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<int> owner_;
  std::vector<bool> owned_;
};

}  // namespace accel::zero
