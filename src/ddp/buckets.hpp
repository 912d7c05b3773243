// What both gradient paths (ddp::GradSync, zero::GradShard) share: the layout of the flat
// communication buckets and the autograd hooks that report each parameter's gradient.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace accel::ddp {

// One bucket: parameters (indices into the parameter list), each one's first element, and after
// the gradients one "this rank used it" flag per parameter.
struct BucketLayout {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;
  int64_t used_offset = 0;
  int64_t numel() const { return used_offset + static_cast<int64_t>(params.size()); }
};

struct BucketPlan {
  std::vector<BucketLayout> buckets;
  std::vector<size_t> bucket_of;  // a parameter's bucket
  std::vector<size_t> slot_of;    // its position inside the bucket
};

// Buckets in reverse parameter order (the order gradients tend to arrive): a small first bucket so
// communication starts early, larger ones after, a new one where the dtype changes, and a
// parameter of `alone_bytes` or more in a bucket of its own.
BucketPlan plan_buckets(const std::vector<at::Tensor>& params, size_t first_bucket_bytes,
                        size_t bucket_bytes, size_t alone_bytes = SIZE_MAX);

// Calls on_gradient(k) right after parameter k's gradient was accumulated into its .grad, for as
// long as this object lives. accel::Error(invalid_argument) when a parameter does not require grad.
class GradientHooks {
 public:
  GradientHooks(const std::vector<at::Tensor>& params, std::function<void(size_t)> on_gradient);
  ~GradientHooks();
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;

 private:
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> keys_;
};

}  // namespace accel::ddp
