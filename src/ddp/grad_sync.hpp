// Data-parallel gradient synchronisation with DDP's semantics and its gradient_as_bucket_view:
// each parameter's .grad lives inside a persistent flat bucket, autograd accumulates into it, and
// each full bucket is averaged across the ranks in place while backward goes on, so nothing is
// copied on the way in or out. Why not c10d::Reducer: it needs a header Debian does not ship and
// its constructor changes between LibTorch releases.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ddp/buckets.hpp"
#include "ddp/gradient_path.hpp"
#include "runtime/communicator.hpp"

namespace accel::ddp {

class GradSync : public GradientPath {
 public:
  // Buckets in reverse parameter order (the order gradients tend to arrive): a small first bucket
  // so communication starts early, larger ones after.
  GradSync(runtime::Communicator& comm, std::vector<at::Tensor> params,
           size_t first_bucket_bytes = size_t{1} << 20, size_t bucket_bytes = size_t{25} << 20);
  ~GradSync() override;
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Before backward: `sync` false is an accumulation micro-step (no communication, gradients
  // accumulate locally as under DDP's no_sync).
  void begin_backward(bool sync) override;
  // After backward: launches the buckets still waiting (a parameter that got no gradient since the
  // last synchronisation brings its .grad as it is, or zero), waits for all, and leaves the
  // averaged gradients in the parameters' .grad, views of the buckets. A parameter no rank used
  // since the last synchronisation and whose .grad is undefined keeps it undefined, as DDP with
  // find_unused_parameters.
  void end_backward() override;

  // True, having zeroed it in place, when `param`'s .grad is one of this synchroniser's bucket
  // views: zeroing must keep the view (set to None, the next backward would allocate a fresh
  // gradient and copy it in again).
  bool zero_grad_in_place(const at::Tensor& param) override;

  // A rank that has joined (join_uneven_inputs) answers one synchronised backward of the others:
  // every bucket all-reduced, in order, with zero gradients and no parameter flagged used.
  void shadow_backward() override;

  size_t num_buckets() const { return buckets_.size(); }

 private:
  struct Bucket : BucketLayout {
    at::Tensor flat;
    std::vector<float> used;  // this rank's flags, written into the bucket as it goes out
    // A joined rank's zeros while it answers the others' backward (for a mapped bucket, its own
    // gradients, kept aside while the bucket lends the others zeros).
    at::Tensor shadow;
    bool mapped = false;  // every rank maps it: its all-reduce works on the copies in place
    size_t pending = 0;
    std::shared_ptr<runtime::PendingReduce> work;
  };
  void on_gradient(size_t param);
  void launch_ready_locked();
  // The bucket's slice for parameter k, shaped as the parameter. Not an autograd view (so that
  // detach_(), which torch::optim's zero_grad calls, works on it as on any gradient).
  at::Tensor slot_of(size_t k) const;
  bool holds_slot(size_t k) const;
  // Makes parameter k's .grad its slot: copies a gradient that lives elsewhere into it.
  void adopt_locked(size_t k);

  runtime::Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<size_t> slot_of_;  // a parameter's position inside its bucket
  std::vector<bool> ready_;
  std::vector<bool> used_;  // got a gradient on this rank since the last synchronisation
  std::vector<at::Tensor> slots_;
  std::unordered_map<const void*, size_t> index_of_;  // a parameter's TensorImpl -> its index
  size_t next_launch_ = 0;
  bool active_ = false;
  std::mutex mutex_;
  std::unique_ptr<GradientHooks> hooks_;  // last: removed first, before what they use
};

// Copies rank 0's values of `tensors` into every rank's (parameters and buffers at prepare, buffers
// before each forward). Fails on every rank alike when the ranks' tensors differ in shape or dtype.
// `verify` first compares every rank's shapes and dtypes (one extra collective): at prepare, not
// before every forward. `root` is the rank whose values every rank takes.
void broadcast_from_main(runtime::Communicator& comm, const std::vector<at::Tensor>& tensors,
                         const char* what, bool verify, int root = 0);

}  // namespace accel::ddp
