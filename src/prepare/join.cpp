// Accelerate's join_uneven_inputs, as PyTorch's Join with a DDP model: every synchronised backward
// inside the block first all-reduces how many ranks are still training; a rank that has run out of
// batches answers with 0 and shadows the gradient all-reduce with zeros (the average still divides
// by the number of processes, as DDP's divide_by_initial_world_size), until the count is 0.
#include <ATen/ATen.h>

#include "common/error.hpp"
#include "ddp/grad_sync.hpp"
#include "prepare/session.hpp"

namespace accel::prepare {

namespace {

// How many ranks are still training: each passes 1 (training) or 0 (joined).
int64_t ranks_training(runtime::Communicator& comm, bool training) {
  at::Tensor count = at::full({1}, training ? 1.0 : 0.0, at::kFloat);
  comm.all_reduce(count, runtime::ReduceOp::kSum);
  return static_cast<int64_t>(count.item<float>() + 0.5f);
}

}  // namespace

void Session::join_begin(int even_batches) {
  if (join_.open) fail(Errc::state, "join_uneven_inputs is already open; end it first");
  const bool even = even_batches >= 0 ? even_batches == 1 : acc_->settings().flag("even_batches");
  const bool enabled = acc_->communicator() && !even;
  // Checked before anything changes: a refusal leaves the dataloaders as they were.
  if (enabled) {
    if (!param_shards_.empty())
      fail(Errc::unsupported,
           "join_uneven_inputs with uneven batches under ZeRO stage 3 (" + acc_->sharding().source +
               "): a rank that has joined cannot serve the parameters it owns to the others' "
               "forwards; keep even_batches on, or use stage 2");
    if (syncs_.size() > 1)
      fail(Errc::unsupported,
           "join_uneven_inputs with several prepared models: the joined rank cannot know in "
           "which order their gradients would be synchronised");
    for (const auto& m : model_order_)
      if (!m->named_buffers().empty())
        fail(Errc::unsupported,
             "join_uneven_inputs with a model that has buffers (batch norm): "
             "every forward broadcasts them, which a joined rank cannot follow");
  }
  JoinState state;
  if (even_batches >= 0)
    for (const auto& l : loader_order_) {
      if (l->is_stream()) continue;  // even_batches does not apply to a stream (as Accelerate)
      const bool was = l->even_batches();
      // A closed (freed) loader stays in the checkpoints' list; there is nothing of it to set.
      if (l->set_even_batches_keeping_position(even)) state.restore.emplace_back(l, was);
    }
  state.enabled = enabled;
  state.open = true;
  join_ = std::move(state);
}

void Session::join_count_step() {
  ranks_training(*acc_->communicator(), true);
  ++join_.steps;
}

void Session::join_end() {
  if (!join_.open) fail(Errc::state, "join_uneven_inputs_end without join_uneven_inputs_begin");
  const JoinState done = std::move(join_);
  join_ = JoinState{};
  for (const auto& [loader, even] : done.restore) loader->set_even_batches_keeping_position(even);
  if (!done.enabled) return;
  auto& comm = *acc_->communicator();
  ddp::GradientPath* sync = syncs_.empty() ? nullptr : syncs_.begin()->second.get();
  while (ranks_training(comm, false) > 0)
    if (sync) sync->shadow_backward();
  // Every rank ends with the parameters of the rank that trained longest (the lowest such rank),
  // as Join's final model sync: a rank that joined early stopped stepping.
  const auto steps = comm.all_gather(at::full({1}, done.steps, at::kLong));
  int authority = 0;
  for (int r = 1; r < static_cast<int>(steps.size()); ++r)
    if (steps[static_cast<size_t>(r)].item<int64_t>() >
        steps[static_cast<size_t>(authority)].item<int64_t>())
      authority = r;
  for (const auto& m : model_order_) {
    std::vector<at::Tensor> params;
    for (const auto& [name, p] : m->named_parameters()) params.push_back(p);
    ddp::broadcast_from_main(comm, params, "the model's parameters", /*verify=*/false, authority);
  }
}

}  // namespace accel::prepare
