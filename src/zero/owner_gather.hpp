// Every rank's copy of some parameters becomes their owners' bytes (ZeRO's parameter all-gather):
// after stage 1-2's optimizer step, and when stage 3 gathers or prefetches a unit. A collective:
// every rank gathers the same parameters, in the same order.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "runtime/communicator.hpp"

namespace accel::zero {

// `owners[k]` is the rank holding the value of `params[k]`; every other rank's tensor (whose
// storage must be there) receives it, bit for bit, written so that autograd sees no modification.
// The parameters travel in chunks of at most `chunk_bytes`, one all-gather per chunk in which each
// rank gives the bytes of the parameters it owns; a larger parameter goes alone, straight from its
// owner's tensor into the others'.
class OwnerGather {
 public:
  // Starts the chunks. `pipelined`: all of them in flight at once, each with buffers of its own
  // (a prefetch, over a transport that overlaps compute); otherwise each completes before the next
  // starts, through two buffers of the largest chunk's size.
  OwnerGather(runtime::Communicator& comm, std::vector<at::Tensor> params, std::vector<int> owners,
              bool pipelined, int64_t chunk_bytes = int64_t{8} << 20);
  ~OwnerGather();
  OwnerGather(const OwnerGather&) = delete;
  OwnerGather& operator=(const OwnerGather&) = delete;

  // Waits for what is in flight and puts each parameter's bytes in place. Once.
  void finish();

 private:
  struct Chunk;
  void start(Chunk& c);
  void complete(Chunk& c);

  runtime::Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<int> owners_;
  std::vector<Chunk> chunks_;
  bool finished_ = false;
};

// An OwnerGather completed at once.
void gather_from_owners(runtime::Communicator& comm, const std::vector<at::Tensor>& params,
                        const std::vector<int>& owners, int64_t chunk_bytes = int64_t{8} << 20);

}  // namespace accel::zero
