#include "ddp/buckets.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "common/error.hpp"

namespace accel::ddp {

BucketPlan plan_buckets(const std::vector<at::Tensor>& params, size_t first_bucket_bytes,
                        size_t bucket_bytes, size_t alone_bytes) {
  BucketPlan plan;
  plan.bucket_of.assign(params.size(), 0);
  plan.slot_of.assign(params.size(), 0);
  auto& buckets = plan.buckets;
  size_t cap = first_bucket_bytes, bytes = 0;
  bool after_alone = false;
  for (size_t k = params.size(); k-- > 0;) {
    const at::Tensor& p = params[k];
    const size_t p_bytes = p.numel() * p.element_size();
    const bool alone = p_bytes >= alone_bytes;
    const bool dtype_change =
        !buckets.empty() && params[buckets.back().params.front()].scalar_type() != p.scalar_type();
    if (buckets.empty() || bytes >= cap || dtype_change || alone || after_alone) {
      if (!buckets.empty()) cap = bucket_bytes;
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().params.push_back(k);
    bytes += p_bytes;
    after_alone = alone;
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t offset = 0;
    for (size_t k : buckets[b].params) {
      plan.bucket_of[k] = b;
      plan.slot_of[k] = buckets[b].offsets.size();
      buckets[b].offsets.push_back(offset);
      offset += params[k].numel();
    }
    buckets[b].used_offset = offset;
  }
  return plan;
}

GradientHooks::GradientHooks(const std::vector<at::Tensor>& params,
                             std::function<void(size_t)> on_gradient) {
  for (size_t k = 0; k < params.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params[k]);
    if (!acc) fail(Errc::invalid_argument, "a parameter to synchronise does not require grad");
    keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [on_gradient, k](const torch::autograd::variable_list& outputs,
                         const torch::autograd::variable_list&) {
          on_gradient(k);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));  // the variable holds it weakly: keep it alive
  }
}

GradientHooks::~GradientHooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
}

}  // namespace accel::ddp
