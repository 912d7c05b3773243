// ZeRO stage 3 (FSDP FULL_SHARD) for one model: each rank keeps only the parameters it owns (the
// owners of zero::assign_owners, as its optimizer and gradients), the others' storage released.
// A unit's parameters (zero/units.hpp) are gathered from their owners just before the unit's
// forward and released after it, gathered again when backward reaches the unit and released once
// autograd has accumulated each of its gradients; the root unit for the whole forward and the
// whole backward. Where the transport overlaps compute (TCP, NCCL), the next unit in the first
// forward's order is gathered while the current one computes (the previous one in backward), as
// the configuration asks (ShardingPlan's prefetch flags). The storage is released in place (the
// tensors, their sizes and autograd's saved references stay), so the optimizer, the gradient hooks
// and the graph never see the difference.
//
// Parameters that stay whole on every rank: the host's (its code reads them directly), those
// sharing storage with another tensor of the model, and a model's whose units could not be
// followed. A parameter that is not on this rank between steps is refused by name wherever
// libaccel reads one (model::Model::require_whole).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "config/sharding.hpp"
#include "model/model.hpp"
#include "runtime/communicator.hpp"
#include "zero/owner_gather.hpp"
#include "zero/units.hpp"

namespace accel::ddp {
class GradientHooks;
}

namespace accel::zero {

// Which of the model's trainable parameters `params` stage 3 releases between uses (the others
// stay whole on every rank, as above). Read from shapes and storages alone: an empty (meta) model
// gets the same answer as the model built whole.
std::vector<bool> sharded_parameters(const model::Model& model,
                                     const std::vector<at::Tensor>& params);

class ParamShard {
 public:
  // `params`: the model's trainable parameters, `owners` their owners (assign_owners). Chooses the
  // units, instruments the model's methods (after giving it fresh copies of them, so that no
  // method compiled earlier runs without the hooks) and releases what this rank does not own.
  // `sharded`: sharded_parameters' answer taken before the parameters were allocated (an empty
  // model's, whose parameters this rank does not own were never given storage); empty: asked now.
  ParamShard(runtime::Communicator& comm, model::Model& model, std::vector<at::Tensor> params,
             std::vector<int> owners, const config::ShardingPlan& plan,
             std::vector<bool> sharded = {});
  // The parameters stay as they are (released ones too: the model refuses to read them).
  ~ParamShard();
  ParamShard(const ParamShard&) = delete;
  ParamShard& operator=(const ParamShard&) = delete;

  const UnitPlan& units() const { return plan_; }
  // Whether `p` is one of the parameters this shard releases between uses (the others, such as the
  // host's, stay whole on every rank and need their owner's value after each optimizer step).
  bool shards(const at::Tensor& p) const;
  // "forward and backward", "backward", ... : where the next unit is prefetched ("none" over a
  // transport that does not overlap compute).
  std::string prefetching() const;

  // Around one call of a method: the root gathered (and methods defined since instrumented);
  // after it, every unit released.
  void begin_forward();
  void end_forward();
  // end_forward after the call failed: never throws (the call's own error is the one to report).
  void end_forward_after_failure() noexcept;
  // Around backward: the root gathered; after it (or its failure), every unit released.
  void begin_backward();
  void end_backward();
  void end_backward_after_failure() noexcept;
  // Every unit gathered until release_all (a collective: checkpoints, join).
  void gather_all();
  void release_all();
  // Every unit released, each whatever happens to the others (a unit whose gather failed stays as
  // it is); never throws.
  void release_all_quietly() noexcept;

  // From the graph's hooks (accel::unit_enter/unit_exit and the exit's backward).
  void enter(size_t unit);
  void exit(size_t unit);
  void backward_reached(size_t unit);

 private:
  struct Unit {
    std::vector<at::Tensor> sharded;         // its parameters that are sharded, in index order
    std::vector<int> owners;                 // of each of those
    std::vector<size_t> foreign;             // of those, the ones this rank does not own (indices)
    size_t trainable = 0;                    // how many gradients backward brings it
    size_t pending = 0;                      // of those, not yet accumulated in this backward
    bool whole = false;                      // gathered
    int depth = 0;                           // forward calls in progress
    std::unique_ptr<OwnerGather> in_flight;  // a prefetch not finished yet
    // Its gather in flight failed with the group: its storage is never touched again (a transfer
    // may still be writing into it), and gathering it is an error.
    bool stranded = false;
  };
  void gather(size_t u);
  void release(size_t u);
  // Starts gathering unit `u` (when there is one, and it is neither whole nor coming).
  void prefetch(size_t u);
  // The unit `step` places after `u` in the first forward's order (-1: before), or none.
  std::optional<size_t> neighbour(size_t u, int step) const;
  void on_gradient(size_t k);
  void instrument_new_methods();

  runtime::Communicator& comm_;
  model::Model& model_;
  std::vector<at::Tensor> params_;
  std::vector<int> owners_;
  UnitPlan plan_;
  std::vector<Unit> units_;
  std::vector<size_t> unit_of_;                         // of each parameter
  std::vector<bool> sharded_;                           // of each parameter
  std::unordered_set<const void*> sharded_impls_;       // their TensorImpls, for shards()
  std::vector<size_t> bytes_;                           // each parameter's storage size when whole
  std::vector<std::unique_ptr<OwnerGather>> stranded_;  // failed gathers, kept referenced
  uint64_t instrumented_revision_ = 0;
  bool backward_ = false;
  bool forward_prefetch_ = false, backward_prefetch_ = false;  // and the transport overlaps
  // The units in the order the first forward entered them, and each one's place there.
  std::vector<size_t> order_;
  std::vector<size_t> position_;
  bool recording_ = false, order_known_ = false;
  std::unique_ptr<ddp::GradientHooks> hooks_;  // last: removed first
};

}  // namespace accel::zero
