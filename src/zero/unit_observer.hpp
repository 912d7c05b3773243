// Other users of the graph's unit hooks (accel::unit_enter / accel::unit_exit, inserted by
// zero::instrument): a submodule object registered here, and not a ZeRO-3 unit, has `observer`
// called just before and just after each call of its methods. Big-model inference's disk offload
// (bigmodel/disk_offload.hpp) is one: Accelerate's AlignDevicesHook pre_forward / post_forward.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace accel::zero {

class UnitObserver {
 public:
  virtual ~UnitObserver() = default;
  virtual void enter(size_t unit) = 0;
  // Returns what the call returns instead of `output` (usually `output` itself).
  virtual at::Tensor exit(size_t unit, const at::Tensor& output) = 0;
};

// Registers `object` (a submodule's TorchScript object) as `observer`'s unit `unit`, until
// forget_unit. The observer must outlive the registration.
void observe_unit(const void* object, UnitObserver* observer, size_t unit);
void forget_unit(const void* object);

}  // namespace accel::zero
