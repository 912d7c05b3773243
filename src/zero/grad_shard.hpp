// ZeRO stage 2 for one model: no rank keeps the whole gradient. Each backward's gradients are moved
// into transient flat buckets as autograd produces them (their .grad dropped at once), each full
// bucket is averaged across the ranks, and the owner of each parameter (the rank that steps it:
// zero::OptimizerShard's owners) adds its part into a gradient of its own, which becomes that
// parameter's .grad after backward. Every micro-step communicates (a rank cannot accumulate what
// it does not keep), as DeepSpeed's stage 2 does. Over shared memory each bucket is a
// reduce-scatter by owner (every rank contributes the bucket, each combines only what it owns);
// other transports all-reduce it and a rank keeps only its part. A gradient of a megabyte or more
// has a bucket of its own and is reduced where autograd made it: no staging copy (the largest
// layer's size off the backward's peak), and its owner keeps that tensor, not a clone. Whether
// anyone used such a parameter travels in one small all-reduce at the end of the backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ddp/buckets.hpp"
#include "ddp/gradient_path.hpp"
#include "runtime/communicator.hpp"

namespace accel::zero {

class GradShard : public ddp::GradientPath {
 public:
  // `owners`: each parameter's owner rank (assign_owners over the same parameters).
  GradShard(runtime::Communicator& comm, std::vector<at::Tensor> params, std::vector<int> owners,
            size_t first_bucket_bytes = size_t{1} << 20, size_t bucket_bytes = size_t{25} << 20);
  ~GradShard() override;
  GradShard(const GradShard&) = delete;
  GradShard& operator=(const GradShard&) = delete;

  // Before backward, every micro-step alike (`sync` is not needed: stage 2 reduces each one):
  // every parameter's .grad is put aside (autograd then makes a fresh one for this backward).
  void begin_backward(bool sync) override;
  // After backward: the buckets still waiting go out (a parameter that got no gradient counts as
  // zero, flagged unused); the owned parameters get their own gradient back as .grad, the others
  // none. A parameter nobody used keeps its gradient as it was.
  void end_backward() override;
  // As ddp::GradSync::shadow_backward: a joined rank reduces zeros with the others.
  void shadow_backward() override;
  // True, having zeroed it in place, when `param`'s .grad is the gradient this rank keeps for it.
  bool zero_grad_in_place(const at::Tensor& param) override;

 private:
  struct Bucket : ddp::BucketLayout {
    at::Tensor staging;  // while the bucket is being filled and reduced: a view of `buffer`
    at::Tensor buffer;   // the spare it came from
    std::vector<float> used;
    size_t pending = 0;
    // One large parameter: `staging` is its gradient itself, flattened; no used flags inside.
    bool direct = false;
    int64_t wire_numel() const { return direct ? used_offset : numel(); }
  };
  void on_gradient(size_t k);
  void launch_ready_locked();
  void reduce_locked(Bucket& b);
  void agree_direct_use_locked();
  at::Tensor& staging_of(Bucket& b);

  runtime::Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<bool> owned_;
  std::vector<at::Tensor> kept_;  // the owned parameters' own gradients (undefined: none yet)
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;
  std::vector<bool> ready_;
  // Direct buckets: whether this rank used each (for the end-of-backward all-reduce), and which
  // owned parameters got their kept gradient in this backward (undone if nobody used them).
  std::vector<size_t> direct_;
  std::vector<float> direct_used_;
  std::vector<bool> kept_fresh_;
  std::vector<at::Tensor> spare_;  // staging buffers free for reuse, one per bucket size
  std::unordered_map<const void*, size_t> index_of_;
  size_t next_launch_ = 0;
  bool active_ = false;
  std::mutex mutex_;
  std::unique_ptr<ddp::GradientHooks> hooks_;  // last: removed first
};

}  // namespace accel::zero
