#include "ddp/grad_sync.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>

#include "common/error.hpp"
#include "ops/collectives.hpp"
#include "runtime/tensor_allocator.hpp"

namespace accel::ddp {

GradSync::GradSync(runtime::Communicator& comm, std::vector<at::Tensor> params,
                   size_t first_bucket_bytes, size_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  ready_.assign(params_.size(), false);
  used_.assign(params_.size(), false);
  BucketPlan plan = plan_buckets(params_, first_bucket_bytes, bucket_bytes);
  bucket_of_ = std::move(plan.bucket_of);
  slot_of_ = std::move(plan.slot_of);
  for (auto& layout : plan.buckets) {
    Bucket b;
    static_cast<BucketLayout&>(b) = std::move(layout);
    b.used.assign(b.params.size(), 0.0F);
    // Over shared memory every rank maps every rank's bucket, and its all-reduce reads and writes
    // them in place (Communicator::shared_zeros).
    b.flat = comm_.shared_zeros(b.numel(), params_[b.params.front()].options());
    b.mapped = comm_.maps_peers(b.flat);
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < params_.size(); ++k) index_of_[params_[k].unsafeGetTensorImpl()] = k;
  hooks_ = std::make_unique<GradientHooks>(params_, [this](size_t k) { on_gradient(k); });
}

GradSync::~GradSync() = default;

at::Tensor GradSync::slot_of(size_t k) const {
  const Bucket& b = buckets_[bucket_of_[k]];
  const at::Tensor& p = params_[k];
  std::vector<int64_t> strides(p.dim(), 1);
  for (int64_t d = p.dim() - 1; d > 0; --d)
    strides[d - 1] = strides[d] * std::max<int64_t>(p.size(d), 1);
  c10::NoGradGuard no_grad;
  return at::empty({0}, b.flat.options())
      .set_(b.flat.storage(), b.flat.storage_offset() + b.offsets[slot_of_[k]], p.sizes(), strides);
}

bool GradSync::holds_slot(size_t k) const {
  const at::Tensor& g = params_[k].grad();
  if (!g.defined() || !g.is_contiguous() || g.sizes() != params_[k].sizes()) return false;
  const Bucket& b = buckets_[bucket_of_[k]];
  return g.data_ptr() == static_cast<char*>(b.flat.data_ptr()) +
                             b.offsets[slot_of_[k]] * static_cast<int64_t>(b.flat.element_size());
}

void GradSync::adopt_locked(size_t k) {
  if (holds_slot(k)) return;
  at::Tensor slot = slot_of(k);
  at::Tensor& grad = params_[k].mutable_grad();
  {
    c10::NoGradGuard no_grad;
    if (grad.defined())
      slot.copy_(grad);
    else
      slot.zero_();
  }
  grad = slot;
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

// Every gradient, in a synchronised backward or not, lands in its slot: accumulation micro-steps
// add to the bucket, and the synchronising one finds the sum there.
void GradSync::on_gradient(size_t k) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!params_[k].grad().defined()) return;
  used_[k] = true;
  adopt_locked(k);
  if (!active_ || ready_[k]) return;
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  b.used[slot_of_[k]] = 1.0F;
  --b.pending;
  launch_ready_locked();
}

// Buckets go out strictly in index order, so every rank issues the same all-reduces in the same
// order whatever order its gradients arrived in.
void GradSync::launch_ready_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    const auto n = static_cast<int64_t>(b.used.size());
    b.flat.narrow(0, b.used_offset, n).copy_(at::from_blob(b.used.data(), {n}, at::kFloat));
    b.work = comm_.all_reduce_start(b.flat, /*average=*/true);
  }
}

void GradSync::end_backward() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!active_) return;
  // Parameters that got no gradient in this backward bring what they hold (an accumulation
  // micro-step's gradient, or zero), flagged by whether this rank used them since the last
  // synchronisation.
  for (size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    ready_[k] = true;
    Bucket& b = buckets_[bucket_of_[k]];
    if (params_[k].grad().defined())
      adopt_locked(k);
    else
      slot_of(k).zero_();
    b.used[slot_of_[k]] = used_[k] ? 1.0F : 0.0F;
    --b.pending;
  }
  launch_ready_locked();
  active_ = false;
  std::fill(used_.begin(), used_.end(), false);
  if (buckets_.empty()) return;
  // The used flags of every bucket reach the host in one copy: on a GPU, one synchronisation per
  // step rather than one per bucket.
  std::vector<at::Tensor> used_parts;
  for (auto& b : buckets_) {
    comm_.all_reduce_finish(b.work);
    b.work.reset();
    used_parts.push_back(b.flat.narrow(0, b.used_offset, static_cast<int64_t>(b.params.size())));
  }
  const at::Tensor used = at::cat(used_parts).to(at::kCPU, at::kDouble);
  const double* used_flags = used.data_ptr<double>();
  for (auto& b : buckets_)
    for (size_t k : b.params)
      // A rank that did not use a parameter others used gets the average too; a parameter nobody
      // used keeps an undefined gradient undefined.
      if (*used_flags++ != 0 && !params_[k].grad().defined())
        params_[k].mutable_grad() = slot_of(k);
}

bool GradSync::zero_grad_in_place(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = index_of_.find(param.unsafeGetTensorImpl());
  if (it == index_of_.end() || !holds_slot(it->second)) return false;
  c10::NoGradGuard no_grad;
  params_[it->second].mutable_grad().zero_();
  return true;
}

// The joined rank's own gradients stay as they are: it reduces zeros from a scratch buffer. A
// bucket the others read in place lends them zeros there and gets this rank's gradients back.
void GradSync::shadow_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& b : buckets_) {
    if (b.mapped) {
      b.shadow = b.flat.clone();
      b.flat.zero_();
      b.work = comm_.all_reduce_start(b.flat, /*average=*/true);
    } else {
      b.shadow = at::zeros_like(b.flat);
      b.work = comm_.all_reduce_start(b.shadow, /*average=*/true);
    }
  }
  for (auto& b : buckets_) {
    comm_.all_reduce_finish(b.work);
    b.work.reset();
    if (b.mapped) b.flat.copy_(b.shadow);
    b.shadow.reset();
  }
}

namespace {

// Tensors [first, last) of one dtype, flattened into one buffer, broadcast, copied back.
void broadcast_chunk(runtime::Communicator& comm, const std::vector<at::Tensor>& group,
                     size_t first, size_t last, int root) {
  // A chunk of one contiguous tensor already where the wire is goes as it is, no copy.
  if (last - first == 1 && group[first].is_contiguous() &&
      group[first].device() == comm.wire_device(group[first])) {
    at::Tensor in_place = group[first].detach().reshape({-1});
    if (in_place.numel() > 0) comm.broadcast(in_place, root);
    return;
  }
  std::vector<at::Tensor> flat_parts;
  // On a GPU with NCCL the parameters are broadcast where they are, without a host copy.
  for (size_t k = first; k < last; ++k)
    flat_parts.push_back(group[k].detach().reshape({-1}).to(comm.wire_device(group[k])));
  at::Tensor flat = at::cat(flat_parts);
  if (flat.numel() == 0) return;
  comm.broadcast(flat, root);
  int64_t offset = 0;
  for (size_t k = first; k < last; ++k) {
    const at::Tensor& t = group[k];
    at::Tensor(t).detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

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
  // Per dtype, in chunks of about 32 MB (a larger tensor alone): a copy of the whole model at
  // prepare would be the peak of a sharded job's memory.
  constexpr int64_t kChunkBytes = int64_t{32} << 20;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  c10::NoGradGuard no_grad;
  for (auto& [dtype, group] : by_dtype) {
    size_t first = 0;
    int64_t bytes = 0;
    for (size_t k = 0; k <= group.size(); ++k) {
      if (k < group.size() && (bytes == 0 || bytes + group[k].nbytes() <= kChunkBytes)) {
        bytes += static_cast<int64_t>(group[k].nbytes());
        continue;
      }
      broadcast_chunk(comm, group, first, k, root);
      // The chunk's buffers go back to the system now: libaccel's allocator would keep each
      // size class's block, and the chunks would add up to a copy of the model (+87 MB for
      // MiniLM at prepare).
      runtime::release_cached_tensor_memory();
      first = k;
      bytes = k < group.size() ? static_cast<int64_t>(group[k].nbytes()) : 0;
    }
  }
}

}  // namespace accel::ddp
