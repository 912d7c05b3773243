// What accel_prepare sets up and what every training step goes through: placed models with their
// gradient synchronisation, mixed precision, gradient accumulation, optimizer and scheduler gating,
// loss scaling and clipping. One per accelerator, owning it; Accelerate's Accelerator object does
// the same. Not thread-safe by itself: the C interface holds the training family's lock (see
// capi/family.hpp) for every call into it.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "ddp/gradient_path.hpp"
#include "model/model.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"
#include "runtime/accelerator.hpp"
#include "zero/optimizer_shard.hpp"

namespace accel::zero {
class ParamShard;
}

namespace accel::prepare {

// Made with std::make_shared: dataloaders it makes reach its communicator through a weak_ptr.
class Session : public std::enable_shared_from_this<Session> {
 public:
  explicit Session(std::unique_ptr<runtime::Accelerator> accelerator);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The objects of one accel_prepare call, sorted by kind; an optimizer with the model it was made
  // over.
  struct Objects {
    std::vector<std::shared_ptr<model::Model>> models;
    std::vector<std::pair<std::shared_ptr<optim::Optimizer>, std::shared_ptr<model::Model>>>
        optimizers;
    std::vector<std::shared_ptr<optim::LrScheduler>> schedulers;
    std::vector<std::shared_ptr<data::DataLoader>> dataloaders;
  };
  // Accelerate's prepare: checks every object first (an optimizer's model prepared here or before,
  // a scheduler's optimizer likewise, every schedule complete), then prepares models, optimizers,
  // dataloaders and schedulers, in that order. Objects prepared before are left as they are.
  void prepare(const Objects& objects);

  // A dataloader over `dataset` for this process, with the accelerator's defaults.
  std::shared_ptr<data::DataLoader> make_dataloader(std::shared_ptr<data::Dataset> dataset) const;

  // Prepared objects in the order they were prepared (what save_state/load_state walk).
  const std::vector<std::shared_ptr<model::Model>>& models() const { return model_order_; }
  const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers() const {
    return optimizer_order_;
  }
  const std::vector<std::shared_ptr<optim::LrScheduler>>& schedulers() const {
    return scheduler_order_;
  }
  const std::vector<std::shared_ptr<data::DataLoader>>& dataloaders() const {
    return loader_order_;
  }
  runtime::Accelerator& accelerator() { return *acc_; }
  const runtime::Accelerator& accelerator() const { return *acc_; }
  // The accumulation counter and the loss scaler, for checkpoints.
  int64_t micro_step() const { return micro_step_; }
  // Micro-steps since the start (Accelerate's Accelerator.step): the manifest's step.
  int64_t total_steps() const { return total_steps_; }
  void restore_micro_step(int64_t step, bool sync, int64_t total) {
    micro_step_ = step;
    total_steps_ = total;
    sync_gradients_ = sync;
  }
  optim::GradScaler* mutable_scaler() { return scaler_.get(); }

  // The program's own objects saved with every checkpoint (register_for_checkpointing): `save`
  // returns the bytes, `load` takes them back; both throw accel::Error on failure. Whatever they
  // hold is destroyed with the session.
  struct CustomObject {
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
  };
  void register_custom(CustomObject o) { custom_.push_back(std::move(o)); }
  const std::vector<CustomObject>& custom_objects() const { return custom_; }
  // A library component's own file in every checkpoint, under its name (the Trainer's
  // trainer_state.json): written by the main process, read back by every rank. Registered and
  // removed by its owner; false (nothing registered) when the name is taken.
  bool register_named(const std::string& name, CustomObject o) {
    return named_.emplace(name, std::move(o)).second;
  }
  void unregister_named(const std::string& name) { named_.erase(name); }
  const std::map<std::string, CustomObject>& named_objects() const { return named_; }

  // Marks a save_state or load_state in progress; a second one (from a checkpoint callback) is
  // accel::Error(state).
  class CheckpointScope {
   public:
    explicit CheckpointScope(Session& s);
    ~CheckpointScope() { s_.checkpointing_ = false; }
    CheckpointScope(const CheckpointScope&) = delete;
    CheckpointScope& operator=(const CheckpointScope&) = delete;

   private:
    Session& s_;
  };
  // Every prepared model's parameters whole on this rank for as long as it lives: ZeRO stage 3
  // gathers the ones it released (a collective: every rank makes one) and releases them again
  // after; nothing under the other stages. What reads or writes whole models (checkpoints) holds
  // one.
  class WholeParameters {
   public:
    explicit WholeParameters(Session& s);
    ~WholeParameters();
    WholeParameters(const WholeParameters&) = delete;
    WholeParameters& operator=(const WholeParameters&) = delete;

   private:
    Session& s_;
  };
  // The next automatic checkpoint number (ProjectConfiguration's iteration).
  int64_t iteration = -1;

  bool is_prepared(const model::Model* m) const { return models_.count(m) > 0; }
  bool is_prepared(const optim::Optimizer* o) const { return optimizers_.count(o) > 0; }
  bool is_prepared(const optim::LrScheduler* s) const { return schedulers_.count(s) > 0; }

  // Calls a method of a prepared model: rank 0's buffers first (DDP's broadcast_buffers), autocast
  // under mixed precision, floating outputs returned in fp32.
  std::vector<at::Tensor> call(model::Model& m, const std::string& method,
                               const std::vector<at::Tensor>& inputs);

  // The host's forward of a model of host-owned tensors, as call() runs a method: rank 0's buffers
  // copied to every rank, then the mixed-precision autocast entered on the calling thread until
  // end_host_forward (below) closes it.
  void forward_begin(model::Model& m);

  // Opens a micro-step (Accelerate's accumulate()): decides sync_gradients.
  // Accelerate's no_sync(model): until the matching end, backward keeps `m`'s gradients on this
  // rank (they add up and are reduced by the first backward after it); scopes nest. Optimizers
  // still step. A model that is not prepared has nothing to hold back.
  void no_sync_begin(const model::Model& m) { ++no_sync_[&m]; }
  void no_sync_end(const model::Model& m);
  bool holds_gradients(const model::Model& m) const { return no_sync_.count(&m) > 0; }

  // Zeroes `param`'s gradient where it is a view into a communication bucket (which stays);
  // false when it is not, and nothing was done.
  bool zero_gradient_in_place(const at::Tensor& param);

  void accumulate();
  // A micro-step whose window the caller decided (the Trainer's prefetched windows, as
  // transformers sets sync_gradients itself): `last` synchronises.
  void accumulate_as(bool last) {
    ++total_steps_;
    micro_step_ = last ? 0 : micro_step_ + 1;
    sync_gradients_ = last;
  }
  bool sync_gradients() const { return sync_gradients_; }
  // loss / accumulation steps (x the loss scale under fp16), backward, gradient synchronisation.
  // `per_window`: the loss is already normalised over the window (num_items_in_batch), so it is
  // not divided by the accumulation steps.
  void backward(const at::Tensor& loss, bool per_window = false);

  // Accelerate's join_uneven_inputs around a training loop (join.cpp). `even_batches` -1 keeps the
  // prepared dataloaders' setting, 0 or 1 overrides it until join_end. Join is on only when the
  // batches may be uneven (even_batches false) and there are several processes. join_end is a
  // collective: a rank that reaches it early answers the others' gradient synchronisation with
  // zeros until every rank has reached it, then every rank takes the parameters of the rank that
  // made the most steps.
  void join_begin(int even_batches);
  void join_end();

  // Optimizer and scheduler steps with Accelerate's gating.
  void optimizer_step(optim::Optimizer& o);
  void optimizer_zero_grad(optim::Optimizer& o);
  bool step_was_skipped(const optim::Optimizer& o) const;
  void scheduler_step(optim::LrScheduler& s);

  double clip_grad_norm(model::Model& m, double max_norm, double norm_type);
  void clip_grad_value(model::Model& m, double clip_value);

  const optim::GradScaler* scaler() const { return scaler_.get(); }

 private:
  at::Tensor sharded_norm(const std::vector<at::Tensor>& params, double norm_type);
  // Places the model on the device, broadcasts rank 0's parameters and buffers, and (with several
  // processes) attaches gradient synchronisation. Preparing twice is a no-op.
  void prepare_model(const std::shared_ptr<model::Model>& model, bool device_placement);
  // Binds the optimizer to its model's (placed) parameters.
  // Stage 3: releases what this rank does not own of `m`'s parameters (`params`, owned by
  // `owners`; `sharded`: which stage 3 shards, when an empty model's were decided before its
  // parameters had storage) and says on rank 0 what the wrap policy could not follow.
  void shard_parameters(model::Model& m, const std::vector<at::Tensor>& params,
                        const std::vector<int>& owners, const std::vector<bool>& sharded);
  void prepare_optimizer(const std::shared_ptr<optim::Optimizer>& optimizer,
                         const std::shared_ptr<model::Model>& model);
  void prepare_scheduler(const std::shared_ptr<optim::LrScheduler>& scheduler);
  void prepare_dataloader(const std::shared_ptr<data::DataLoader>& loader);
  void unscale_for(const std::vector<at::Tensor>& params);
  // accel::Error(state) when the host resized or replaced a tensor it lent to a prepared model.
  void check_host_tensors() const;
  // Rank 0's buffers to every rank (DDP's broadcast_buffers), before each forward.
  void broadcast_buffers(const model::Model& m);

  std::unique_ptr<runtime::Accelerator> acc_;
  std::map<const model::Model*, std::shared_ptr<model::Model>> models_;
  std::set<const model::Model*> placed_;  // moved to the device (device_placement)
  std::map<const model::Model*, std::unique_ptr<ddp::GradientPath>> syncs_;
  std::map<const model::Model*, int> no_sync_;  // open no_sync scopes by model
  // ZeRO stage 3: which parameters each prepared model holds on this rank, and when it gathers
  // the others.
  std::map<const model::Model*, std::unique_ptr<zero::ParamShard>> param_shards_;
  zero::ParamShard* param_shard_of(const model::Model& m) const;
  // ZeRO stage 1 and up: which parameters each prepared optimizer steps on this rank.
  std::map<const optim::Optimizer*, std::unique_ptr<zero::OptimizerShard>> shards_;
  // join_uneven_inputs (join.cpp): on between join_begin and join_end when the ranks' batches may
  // be uneven; `steps` counts the synchronised backwards this rank made inside it.
  struct JoinState {
    bool open = false;
    bool enabled = false;
    int64_t steps = 0;
    std::vector<std::pair<std::shared_ptr<data::DataLoader>, bool>> restore;  // even_batches
  };
  JoinState join_;
  void join_count_step();
  std::map<const optim::Optimizer*, std::shared_ptr<optim::Optimizer>> optimizers_;
  std::set<const optim::Optimizer*> skipped_;
  std::map<const optim::LrScheduler*, std::shared_ptr<optim::LrScheduler>> schedulers_;
  std::unique_ptr<optim::GradScaler> scaler_;
  std::vector<std::shared_ptr<model::Model>> model_order_;
  std::vector<std::shared_ptr<optim::Optimizer>> optimizer_order_;
  std::vector<std::shared_ptr<optim::LrScheduler>> scheduler_order_;
  std::vector<std::shared_ptr<data::DataLoader>> loader_order_;
  std::vector<CustomObject> custom_;
  std::map<std::string, CustomObject> named_;
  bool checkpointing_ = false;
  bool sync_gradients_ = true;
  // GradientAccumulationPlugin's options, fixed at accel_init (read on every micro-step).
  const bool sync_each_batch_, sync_with_dataloader_;
  int64_t micro_step_ = 0;
  int64_t total_steps_ = 0;
};

// A host forward of a model that is not prepared: nothing to do but be closed by
// end_host_forward.
void begin_unprepared_forward(const model::Model& m);
// Closes this thread's innermost host forward, which must be of `m` (accel::Error(state)
// otherwise): leaves its autocast. Needs no session, so a forward opened before its accelerator
// was freed still closes.
void end_host_forward(const model::Model& m);

// The trainable parameters of `m`, in registration order.
std::vector<at::Tensor> trainable_parameters(const model::Model& m);

// An optimizer used without accel_prepare binds to its model's parameters on first use.
void bind_unprepared(optim::Optimizer& optimizer, const model::Model& m);

}  // namespace accel::prepare
