// libaccel_cuda.so: the part of libaccel that needs CUDA's and NCCL's headers (see plugin.hpp).
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>

#include "cuda/plugin.hpp"

namespace {

int device_count() {
  return static_cast<int>(c10::cuda::device_count());
}

void set_device(int device) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
}

c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout, int device) {
  // NCCL reports failures asynchronously and its watchdog may end the process; with blocking wait
  // a failed or timed-out collective throws from wait() instead, on the rank that waits, which is
  // how libaccel reports every collective failure (accel_status, the peer named).
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
  set_device(device);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  const at::Device bound(at::kCUDA, static_cast<c10::DeviceIndex>(device));
  group->setBoundDeviceId(bound);
  // The communicator now rather than at the first collective, so that a rank that cannot reach
  // the others fails while forming the group.
  group->eagerConnectSingleDevice(bound);
  return group;
}

const accel::cuda::Plugin kPlugin{accel::cuda::kPluginAbi, device_count, make_nccl_group,
                                  set_device};

}  // namespace

extern "C" __attribute__((visibility("default"))) const accel::cuda::Plugin* accel_cuda_plugin() {
  return &kPlugin;
}
