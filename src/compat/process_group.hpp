// The type a process group's collectives are called on: in 1.13 ProcessGroupGloo is a
// c10d::ProcessGroup, in 2.x a c10d::Backend (ProcessGroup became a front that dispatches to
// backends by device). Both declare allreduce, broadcast, allgather and barrier alike.
#pragma once

#include <chrono>
#include <string>

#include "compat/torch_version.hpp"

#if ACCEL_TORCH2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace accel::compat {

#if ACCEL_TORCH2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

// Where Gloo's transport listens: a named interface, an address, or the default (the address the
// host name resolves to).
struct GlooEndpoint {
  std::string interface;
  std::string address;
};

// A Gloo process group over `store` (the only file that includes ProcessGroupGloo.hpp).
c10::intrusive_ptr<Group> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int size, std::chrono::milliseconds timeout,
                                          const GlooEndpoint& endpoint, int threads);

}  // namespace accel::compat
