// libaccel's CUDA part lives in a module of its own, libaccel_cuda.so, built where the LibTorch
// has CUDA (tools/fetch_torch.sh's wheel does) and loaded only when a run may use a GPU: a
// CPU-only machine then needs none of CUDA's libraries (cuBLAS, cuDNN, NCCL: ~2 GB) to load
// libaccel. Loading it loads libtorch_cuda.so, which registers LibTorch's CUDA hooks: from then on
// at::Tensor::to("cuda:N"), pin_memory() and streams work through LibTorch's dispatcher, so only
// what needs CUDA's or NCCL's headers (making the NCCL process group) is behind this interface.
#pragma once

#include <chrono>
#include <string>

#include "compat/process_group.hpp"

namespace accel::cuda {

// Bumped when Plugin changes: a stale module beside a newer libaccel is refused, not called.
constexpr int kPluginAbi = 1;

struct Plugin {
  int abi;
  // Devices the CUDA driver shows this process; 0 without a driver or a GPU.
  int (*device_count)();
  // Makes `device` this thread's current device, then an NCCL process group over `store` bound to
  // it, its communicator connected before returning. Collectives wait at most `timeout` (wait()
  // throws then: the group runs with TORCH_NCCL_BLOCKING_WAIT=1 unless the user set it).
  c10::intrusive_ptr<compat::Group> (*make_nccl_group)(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout,
                                                       int device);
  // Makes `device` the calling thread's current CUDA device.
  void (*set_device)(int device);
};

// The module, loaded once from beside libaccel.so; nullptr when this build has none or it does not
// load (*why then says which, e.g. a CUDA library it needs is missing).
const Plugin* load_plugin(std::string* why);

}  // namespace accel::cuda
