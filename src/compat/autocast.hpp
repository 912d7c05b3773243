// Autocast's per-device switches: 1.13 has one function pair per device (set_enabled for CUDA,
// set_cpu_enabled, ...), 2.x one pair taking the device type (the old names are deprecated).
#pragma once

#include <ATen/autocast_mode.h>

#include "compat/torch_version.hpp"

namespace accel::compat {

inline bool autocast_enabled(bool cuda) {
#if ACCEL_TORCH2
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(bool cuda, bool on) {
#if ACCEL_TORCH2
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, on);
#else
  cuda ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
#endif
}

inline at::ScalarType autocast_dtype(bool cuda) {
#if ACCEL_TORCH2
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(bool cuda, at::ScalarType dtype) {
#if ACCEL_TORCH2
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, dtype);
#else
  cuda ? at::autocast::set_autocast_gpu_dtype(dtype) : at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

}  // namespace accel::compat
