// How torch::optim keys its per-parameter state: 1.13 by the text of the TensorImpl's address,
// 2.x by the address itself.
#pragma once

#include <ATen/core/Tensor.h>

#include "compat/torch_version.hpp"

#if !ACCEL_TORCH2
#include <c10/util/string_utils.h>
#endif

namespace accel::compat {

inline auto optim_state_key(const at::Tensor& param) {
#if ACCEL_TORCH2
  return static_cast<void*>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}

using OptimStateKey = decltype(optim_state_key(std::declval<const at::Tensor&>()));

}  // namespace accel::compat
