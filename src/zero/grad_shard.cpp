#include "zero/grad_shard.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

namespace accel::zero {

GradShard::GradShard(runtime::Communicator& comm, std::vector<at::Tensor> params,
                     std::vector<int> owners, size_t first_bucket_bytes, size_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  for (int o : owners) owned_.push_back(o == comm_.rank());
  kept_.resize(params_.size());
  ready_.assign(params_.size(), false);
  kept_fresh_.assign(params_.size(), false);
  ddp::BucketPlan plan =
      ddp::plan_buckets(params_, first_bucket_bytes, bucket_bytes, first_bucket_bytes);
  bucket_of_ = std::move(plan.bucket_of);
  slot_of_ = std::move(plan.slot_of);
  for (auto& layout : plan.buckets) {
    Bucket b;
    static_cast<ddp::BucketLayout&>(b) = std::move(layout);
    b.used.assign(b.params.size(), 0.0F);
    const at::Tensor& p = params_[b.params.front()];
    b.direct = b.params.size() == 1 &&
               static_cast<size_t>(p.numel() * p.element_size()) >= first_bucket_bytes;
    if (b.direct) direct_.push_back(buckets_.size());
    buckets_.push_back(std::move(b));
  }
  direct_used_.assign(direct_.size(), 0.0F);
  for (size_t k = 0; k < params_.size(); ++k) {
    index_of_[params_[k].unsafeGetTensorImpl()] = k;
    // A gradient from before prepare (a backward run earlier) is kept by its owner only.
    if (owned_[k] && params_[k].grad().defined()) kept_[k] = params_[k].grad();
    if (!owned_[k]) params_[k].mutable_grad() = at::Tensor();
  }
  hooks_ = std::make_unique<ddp::GradientHooks>(params_, [this](size_t k) { on_gradient(k); });
}

GradShard::~GradShard() = default;

void GradShard::begin_backward(bool /*sync*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = true;
  next_launch_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.used.assign(b.used.size(), 0.0F);
  }
  std::fill(kept_fresh_.begin(), kept_fresh_.end(), false);
  for (size_t k = 0; k < params_.size(); ++k) {
    // What the program did to an owned gradient since: set it to none (start again), or put a
    // tensor of its own there (keep that).
    const at::Tensor& g = params_[k].grad();
    if (owned_[k] && !g.defined())
      kept_[k] = at::Tensor();
    else if (owned_[k] && !g.is_same(kept_[k]))
      kept_[k] = g;
    params_[k].mutable_grad() = at::Tensor();
  }
}

// A buffer from the spares when one is large enough (the whole buffer goes back after use, so
// the spares never shrink; they last until the end of the backward).
at::Tensor& GradShard::staging_of(Bucket& b) {
  if (b.staging.defined()) return b.staging;
  const at::Tensor& like = params_[b.params.front()];
  auto fits = [&](const at::Tensor& t) {
    return t.numel() >= b.numel() && t.scalar_type() == like.scalar_type() &&
           t.device() == like.device();
  };
  auto it = std::find_if(spare_.begin(), spare_.end(), fits);
  if (it != spare_.end()) {
    b.buffer = *it;
    spare_.erase(it);
  } else {
    b.buffer = at::empty({b.numel()}, like.options().requires_grad(false));
  }
  b.staging = b.buffer.narrow(0, 0, b.numel());
  return b.staging;
}

// The gradient autograd just made moves into the bucket, and .grad is dropped: this rank keeps
// only what it owns, after the reduction.
void GradShard::on_gradient(size_t k) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_ || ready_[k] || !params_[k].grad().defined()) return;
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  const size_t j = slot_of_[k];
  if (b.direct) {
    // Autograd's tensor is this rank's alone (it either stole the incoming gradient or cloned
    // it), so it can be reduced in place.
    b.staging = params_[k].grad().reshape({-1});
  } else {
    c10::NoGradGuard no_grad;
    staging_of(b)
        .narrow(0, b.offsets[j], params_[k].numel())
        .copy_(params_[k].grad().reshape({-1}));
  }
  params_[k].mutable_grad() = at::Tensor();
  b.used[j] = 1.0F;
  --b.pending;
  launch_ready_locked();
}

void GradShard::launch_ready_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0)
    reduce_locked(buckets_[next_launch_++]);
}

// Reduced at once, whatever the transport: the staging buffer is free again before the next
// bucket fills, so a rank holds at most a bucket or two of gradients it does not own.
void GradShard::reduce_locked(Bucket& b) {
  c10::NoGradGuard no_grad;
  if (b.direct) {
    const size_t k = b.params.front();
    // Only the owner needs the average; the others just contribute.
    std::vector<std::pair<int64_t, int64_t>> mine;
    if (owned_[k]) mine.emplace_back(0, b.staging.numel());
    comm_.reduce_for(b.staging, /*average=*/true, mine);
    if (owned_[k] && kept_[k].defined()) {
      kept_[k].add_(b.staging.view(params_[k].sizes()));
    } else if (owned_[k]) {
      kept_[k] = b.staging.view(params_[k].sizes());
      kept_fresh_[k] = true;
    }
    b.staging = at::Tensor();
    return;
  }
  at::Tensor& flat = staging_of(b);
  const auto n = static_cast<int64_t>(b.used.size());
  flat.narrow(0, b.used_offset, n).copy_(at::from_blob(b.used.data(), {n}, at::kFloat));
  // This rank needs the averages of the parameters it owns and the used flags; shared memory
  // combines only those here (a reduce-scatter by owner), other transports the whole bucket.
  std::vector<std::pair<int64_t, int64_t>> mine;
  for (size_t j = 0; j < b.params.size(); ++j) {
    const size_t k = b.params[j];
    if (!owned_[k]) continue;
    const int64_t from = b.offsets[j], to = from + params_[k].numel();
    if (!mine.empty() && mine.back().second == from)
      mine.back().second = to;  // neighbours merge: fewer, longer passes
    else
      mine.emplace_back(from, to);
  }
  mine.emplace_back(b.used_offset, b.used_offset + n);
  comm_.reduce_for(flat, /*average=*/true, mine);
  const at::Tensor used = flat.narrow(0, b.used_offset, n).to(at::kCPU, at::kDouble);
  const double* flags = used.data_ptr<double>();
  for (size_t j = 0; j < b.params.size(); ++j) {
    const size_t k = b.params[j];
    if (!owned_[k] || flags[j] == 0) continue;  // not ours, or nobody used it
    const at::Tensor avg =
        flat.narrow(0, b.offsets[j], params_[k].numel()).view(params_[k].sizes());
    if (kept_[k].defined())
      kept_[k].add_(avg);  // accumulation micro-steps add up here
    else
      kept_[k] = avg.clone();
  }
  spare_.push_back(b.buffer);
  b.staging = at::Tensor();
  b.buffer = at::Tensor();
}

void GradShard::end_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    ready_[k] = true;
    Bucket& b = buckets_[bucket_of_[k]];
    const size_t j = slot_of_[k];
    if (b.direct)
      b.staging = at::zeros({params_[k].numel()}, params_[k].options().requires_grad(false));
    else
      staging_of(b).narrow(0, b.offsets[j], params_[k].numel()).zero_();
    b.used[j] = 0.0F;
    --b.pending;
  }
  launch_ready_locked();
  agree_direct_use_locked();
  active_ = false;
  // The staging buffers go back to the allocator: the optimizer step, where the owned gradients
  // and the optimizer state meet, is then not also holding a bucket or two of others' gradients.
  spare_.clear();
  for (size_t k = 0; k < params_.size(); ++k)
    if (owned_[k] && kept_[k].defined()) params_[k].mutable_grad() = kept_[k];
}

// Whether anyone used each direct bucket's parameter: a gradient kept in this backward for a
// parameter nobody used (the average of zeros) is undone, so that it keeps what it had: none.
void GradShard::agree_direct_use_locked() {
  if (direct_.empty()) return;
  for (size_t d = 0; d < direct_.size(); ++d) direct_used_[d] = buckets_[direct_[d]].used[0];
  c10::NoGradGuard no_grad;
  at::Tensor flags =
      at::from_blob(direct_used_.data(), {static_cast<int64_t>(direct_.size())}, at::kFloat)
          .to(params_.front().device(), /*non_blocking=*/false, /*copy=*/true);
  comm_.all_reduce_finish(comm_.all_reduce_start(flags, /*average=*/false));
  const at::Tensor anyone = flags.to(at::kCPU);
  for (size_t d = 0; d < direct_.size(); ++d) {
    const size_t k = buckets_[direct_[d]].params.front();
    if (anyone.data_ptr<float>()[d] == 0 && kept_fresh_[k]) kept_[k] = at::Tensor();
  }
}

bool GradShard::zero_grad_in_place(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = index_of_.find(param.unsafeGetTensorImpl());
  if (it == index_of_.end()) return false;
  const size_t k = it->second;
  if (!owned_[k] || !kept_[k].defined()) return false;
  c10::NoGradGuard no_grad;
  kept_[k].zero_();
  return true;
}

void GradShard::shadow_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    at::Tensor zeros = at::zeros({b.wire_numel()}, params_[b.params.front()].options());
    comm_.all_reduce_finish(comm_.all_reduce_start(zeros, /*average=*/true));
  }
  if (!direct_.empty()) {
    at::Tensor flags = at::zeros({static_cast<int64_t>(direct_.size())},
                                 at::TensorOptions(at::kFloat).device(params_.front().device()));
    comm_.all_reduce_finish(comm_.all_reduce_start(flags, /*average=*/false));
  }
}

}  // namespace accel::zero
