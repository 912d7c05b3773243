// Accelerate's collectives on tensors: gather, pad_across_processes, reduce, broadcast, and
// gather_object for bytes. Each checks that the ranks agree (shape, dtype) before moving data, so a
// mismatch is an error on every rank, never a hang or garbage. In a world of one each is a copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "runtime/communicator.hpp"
#include "runtime/gradient_state.hpp"

namespace accel::ops {

enum class Reduction { kSum, kMean, kMax, kMin };

// `comm` is null in a world of one.
at::Tensor gather(runtime::Communicator* comm, const at::Tensor& tensor);
at::Tensor pad_across_processes(runtime::Communicator* comm, const at::Tensor& tensor, int64_t dim,
                                double pad_value, bool pad_first);
at::Tensor reduce(runtime::Communicator* comm, const at::Tensor& tensor, Reduction reduction);
// `tensor` is read on `root` only; it may be undefined elsewhere.
at::Tensor broadcast(runtime::Communicator* comm, const at::Tensor& tensor, int root);
// gather for evaluation: ranks may hold different numbers of rows (uneven last batches), and when
// the active data loader is on its last batch, the samples duplicated to even it out are dropped,
// so every sample of the dataset is counted exactly once.
at::Tensor gather_for_metrics(runtime::Communicator* comm, const at::Tensor& tensor,
                              const runtime::GradientState& state);
std::vector<std::string> gather_object(runtime::Communicator* comm, const std::string& bytes);

}  // namespace accel::ops
