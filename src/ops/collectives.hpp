// Accelerate's collectives on tensors: gather, pad_across_processes, reduce, broadcast, and
// gather_object for bytes. Each checks that the ranks agree (shape, dtype) before moving data, so a
// mismatch is an error on every rank, never a hang or garbage. In a world of one each is a copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "runtime/communicator.hpp"

namespace accel::ops {

enum class Reduction { kSum, kMean, kMax, kMin };

// `comm` is null in a world of one.
at::Tensor gather(runtime::Communicator* comm, const at::Tensor& tensor);
at::Tensor pad_across_processes(runtime::Communicator* comm, const at::Tensor& tensor, int64_t dim,
                                double pad_value, bool pad_first);
at::Tensor reduce(runtime::Communicator* comm, const at::Tensor& tensor, Reduction reduction);
// `tensor` is read on `root` only; it may be undefined elsewhere.
at::Tensor broadcast(runtime::Communicator* comm, const at::Tensor& tensor, int root);
std::vector<std::string> gather_object(runtime::Communicator* comm, const std::string& bytes);

}  // namespace accel::ops
