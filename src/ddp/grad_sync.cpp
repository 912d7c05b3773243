#include "ddp/grad_sync.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>

#include "common/error.hpp"
#include "ops/collectives.hpp"

namespace accel::ddp {

GradSync::GradSync(runtime::Communicator& comm, std::vector<at::Tensor> params,
                   size_t first_bucket_bytes, size_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  ready_.assign(params_.size(), false);
  size_t cap = first_bucket_bytes, bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const at::Tensor& p = params_[k];
    const bool dtype_change =
        !buckets_.empty() && !buckets_.back().params.empty() &&
        params_[buckets_.back().params.front()].scalar_type() != p.scalar_type();
    if (buckets_.empty() || bytes >= cap || dtype_change) {
      if (!buckets_.empty()) cap = bucket_bytes;
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bytes += p.numel() * p.element_size();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    int64_t offset = 0;
    for (size_t k : bucket.params) {
      bucket_of_[k] = b;
      slot_of_[k] = bucket.offsets.size();
      bucket.offsets.push_back(offset);
      offset += params_[k].numel();
    }
    bucket.used_offset = offset;
    const at::Tensor& first = params_[bucket.params.front()];
    bucket.flat = at::zeros({offset + static_cast<int64_t>(bucket.params.size())},
                            first.options().requires_grad(false));
  }
  // The hook runs right after a parameter's gradient has been accumulated into .grad.
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    if (!acc) fail(Errc::invalid_argument, "a parameter to synchronise does not require grad");
    hook_keys_.push_back(
        acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, k](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list&) {
              on_gradient(k);
              return outputs;
            })));
    accumulators_.push_back(std::move(acc));  // the variable holds it weakly: keep it alive
  }
}

GradSync::~GradSync() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradSync::begin_backward(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = sync;
  next_launch_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
}

void GradSync::on_gradient(size_t k) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_ || ready_[k]) return;
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  const size_t j = slot_of_[k];
  const at::Tensor& grad = params_[k].grad();
  at::Tensor slot = b.flat.narrow(0, b.offsets[j], params_[k].numel());
  if (grad.defined()) {
    slot.view(params_[k].sizes()).copy_(grad);
    b.flat[b.used_offset + static_cast<int64_t>(j)].fill_(1);
  } else {
    slot.zero_();
    b.flat[b.used_offset + static_cast<int64_t>(j)].fill_(0);
  }
  --b.pending;
  launch_ready_locked();
}

// Buckets go out strictly in index order, so every rank issues the same all-reduces in the same
// order whatever order its gradients arrived in.
void GradSync::launch_ready_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = comm_.all_reduce_start(b.flat);
  }
}

void GradSync::end_backward() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!active_) return;
  // Parameters that got no gradient in this backward: zero, flagged unused, so no bucket waits.
  for (size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    ready_[k] = true;
    Bucket& b = buckets_[bucket_of_[k]];
    const size_t j = slot_of_[k];
    b.flat.narrow(0, b.offsets[j], params_[k].numel()).zero_();
    b.flat[b.used_offset + static_cast<int64_t>(j)].fill_(0);
    --b.pending;
  }
  launch_ready_locked();
  active_ = false;
  if (buckets_.empty()) return;
  const double world = comm_.size();
  // Average in place, once per bucket (the used flags stay non-zero where anyone used the
  // parameter). The flags of every bucket then reach the host in one copy: on a GPU, one
  // synchronisation per step rather than one per bucket.
  std::vector<at::Tensor> used_parts;
  for (auto& b : buckets_) {
    comm_.all_reduce_finish(b.work);
    b.work.reset();
    b.flat.div_(world);
    used_parts.push_back(
        b.flat.narrow(0, b.used_offset, static_cast<int64_t>(b.params.size())).to(at::kDouble));
  }
  const at::Tensor used = at::cat(used_parts).to(at::kCPU);
  const double* used_flags = used.data_ptr<double>();
  for (auto& b : buckets_) {
    for (size_t j = 0; j < b.params.size(); ++j) {
      at::Tensor& p = params_[b.params[j]];
      if (*used_flags++ == 0) continue;  // nobody used it: leave its gradient alone
      // One copy into each gradient: no temporary the size of the bucket.
      at::Tensor avg = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(avg);
      else
        p.mutable_grad() = avg.clone();
    }
  }
}

void GradSync::shadow_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& b : buckets_) {
    b.flat.zero_();
    b.work = comm_.all_reduce_start(b.flat);
  }
  for (auto& b : buckets_) {
    comm_.all_reduce_finish(b.work);
    b.work.reset();
  }
}

void broadcast_from_main(runtime::Communicator& comm, const std::vector<at::Tensor>& tensors,
                         const char* what, bool verify, int root) {
  // A signature of shapes and dtypes first: a model that differs across ranks is an error on every
  // rank, not a garbled broadcast.
  if (verify) {
    std::string signature;
    for (const auto& t : tensors) {
      signature += c10::toString(t.scalar_type());
      for (int64_t d : t.sizes()) signature += "," + std::to_string(d);
      signature += ";";
    }
    const auto all = ops::gather_object(&comm, signature);
    for (size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0])
        fail(Errc::shape, std::string(what) + " differ between rank 0 and rank " +
                              std::to_string(r) + ": every rank must build the same model");
  }
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  at::NoGradGuard no_grad;
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat_parts;
    // On a GPU with NCCL the parameters are broadcast where they are, without a host copy.
    for (const auto& t : group)
      flat_parts.push_back(t.detach().reshape({-1}).to(comm.wire_device(t)));
    at::Tensor flat = at::cat(flat_parts);
    if (flat.numel() == 0) continue;
    comm.broadcast(flat, root);
    int64_t offset = 0;
    for (const auto& t : group) {
      at::Tensor(t).detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace accel::ddp
