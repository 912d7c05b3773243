// What a failure thrown by c10d says about its cause. LibTorch 2.x throws typed errors
// (c10::DistNetworkError: a socket to a peer or the store broke or timed out;
// c10::DistStoreError: the store refused or timed out); 1.13 throws plain c10::Error, and gloo's
// own exceptions carry no c10 type in either line, so the message stays the fallback.
#pragma once

#include <c10/util/Exception.h>

#include <exception>

#include "compat/torch_version.hpp"

namespace accel::compat {

enum class DistFailure { kUnknown, kNetwork, kStore };

inline DistFailure dist_failure_of(const std::exception& e) {
#if ACCEL_TORCH2
  if (dynamic_cast<const c10::DistNetworkError*>(&e)) return DistFailure::kNetwork;
  if (dynamic_cast<const c10::DistStoreError*>(&e)) return DistFailure::kStore;
#else
  (void)e;
#endif
  return DistFailure::kUnknown;
}

}  // namespace accel::compat
