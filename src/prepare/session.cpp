#include "prepare/session.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "compat/autocast.hpp"
#include "ddp/grad_sync.hpp"
#include "ops/collectives.hpp"
#include "optim/step_rules.hpp"
#include "prepare/empty_model.hpp"
#include "runtime/tensor_allocator.hpp"
#include "zero/grad_shard.hpp"
#include "zero/param_shard.hpp"
#include "zero/partition.hpp"

namespace accel::prepare {

namespace {

// Python's `torch.autocast(device)` as a scope: CPU autocast runs bf16 only in LibTorch 1.13.
class AutocastScope {
 public:
  AutocastScope(bool cuda, at::ScalarType dtype) : cuda_(cuda) {
    cache_ = at::autocast::is_autocast_cache_enabled();
    enabled_ = compat::autocast_enabled(cuda_);
    dtype_ = compat::autocast_dtype(cuda_);
    compat::set_autocast_enabled(cuda_, true);
    compat::set_autocast_dtype(cuda_, dtype);
    at::autocast::increment_nesting();
    at::autocast::set_autocast_cache_enabled(true);
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast_enabled(cuda_, enabled_);
    compat::set_autocast_dtype(cuda_, dtype_);
    at::autocast::set_autocast_cache_enabled(cache_);
  }

 private:
  bool cuda_, enabled_, cache_;
  at::ScalarType dtype_;
};

// The autocast scopes of the host forwards open on this thread (forward_begin/forward_end), each
// with its model; null where mixed precision is off.
thread_local std::vector<std::pair<const model::Model*, std::unique_ptr<AutocastScope>>>
    open_forwards;

}  // namespace

std::vector<at::Tensor> trainable_parameters(const model::Model& m) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : m.named_parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

void bind_unprepared(optim::Optimizer& optimizer, const model::Model& m) {
  if (!optimizer.bound()) {
    m.require_filled("the optimizer over the model");
    optimizer.bind(trainable_parameters(m));
  }
}

Session::Session(std::unique_ptr<runtime::Accelerator> accelerator)
    : acc_(std::move(accelerator)),
      sync_each_batch_(acc_->settings().flag("sync_each_batch")),
      sync_with_dataloader_(acc_->settings().flag("sync_with_dataloader")) {
  if (acc_->mixed_precision() == runtime::MixedPrecision::kFp16) {
    scaler_ = std::make_unique<optim::GradScaler>();
    // Stage 2: each rank checks only the gradients it owns; all must skip alike.
    if (auto* comm = acc_->communicator(); comm && acc_->sharding().stage >= 2)
      scaler_->agree = [comm](bool found) {
        at::Tensor flag = at::full({1}, found ? 1 : 0, at::kInt);
        comm->all_reduce(flag, runtime::ReduceOp::kMax);
        return flag.item<int>() != 0;
      };
  }
}

Session::~Session() = default;

Session::CheckpointScope::CheckpointScope(Session& s) : s_(s) {
  if (s_.checkpointing_)
    fail(Errc::state,
         "save_state/load_state called while another one is running (from a checkpoint "
         "callback?)");
  // An empty model prepared under stage 3 and not loaded yet: refused on every rank alike, before
  // any of the checkpoint's collectives (and before load_state changed anything).
  for (const auto& m : s_.model_order_) m->require_filled("accel_save_state/accel_load_state");
  s_.checkpointing_ = true;
}

void Session::prepare(const Objects& objects) {
  auto prepared_here = [&](const std::shared_ptr<model::Model>& m) {
    for (const auto& own : objects.models)
      if (own == m) return true;
    return is_prepared(m.get());
  };
  for (const auto& [o, m] : objects.optimizers)
    if (!prepared_here(m))
      fail(Errc::state,
           "an optimizer's model is neither prepared nor among the objects: pass the model to "
           "accel_prepare too (its parameters must be placed first)");
  for (const auto& s : objects.schedulers) {
    bool found = is_prepared(s->optimizer().get());
    for (const auto& [o, m] : objects.optimizers) found = found || o == s->optimizer();
    if (!found)
      fail(Errc::state,
           "a scheduler's optimizer is neither prepared nor among the objects: pass the optimizer "
           "to accel_prepare too");
    s->schedule().validate();
  }
  if (const int stage = acc_->sharding().stage; acc_->communicator() && stage >= 1)
    for (const auto& [o, m] : objects.optimizers)
      if (o->foreign())
        fail(Errc::unsupported,
             "ZeRO stage " + std::to_string(stage) +
                 " keeps each process's share of the optimizer state, which libaccel can split "
                 "only for its own optimizers; a program's own torch::optim optimizer steps every "
                 "parameter on every process. Use ZeRO stage 0 (data parallel), or libaccel's "
                 "optimizer of the same kind (accel_optimizer_new, accel::AdamWOptions)");
  const bool placement = acc_->settings().flag("device_placement");
  for (const auto& m : objects.models) prepare_model(m, placement);
  for (const auto& [o, m] : objects.optimizers) prepare_optimizer(o, m);
  for (const auto& l : objects.dataloaders) prepare_dataloader(l);
  for (const auto& s : objects.schedulers) prepare_scheduler(s);
}

namespace {

// How a dispatching dataloader sends rank 0's batch to every rank: the fixed-size info first, then
// a failure's message or each field, shapes included (ops::broadcast). Through a weak_ptr: a
// dataloader may outlive its accelerator, and then it says so instead of using a freed one.
std::function<void(std::vector<int64_t>&, std::vector<at::Tensor>&, std::string&)>
dispatch_broadcast(std::weak_ptr<const Session> weak) {
  return [weak](std::vector<int64_t>& info, std::vector<at::Tensor>& fields, std::string& message) {
    const auto session = weak.lock();
    if (!session)
      fail(Errc::state, "the accelerator this dataloader dispatches batches through was freed");
    auto* comm = const_cast<Session&>(*session).accelerator().communicator();
    const bool root = comm->rank() == 0;
    at::Tensor head = root ? at::tensor(info, at::kLong) : at::Tensor();
    head = ops::broadcast(comm, head, 0);
    info.assign(head.data_ptr<int64_t>(), head.data_ptr<int64_t>() + head.numel());
    if (info.at(0) == 2) {
      at::Tensor text =
          root ? at::from_blob(message.data(), {static_cast<int64_t>(message.size())}, at::kByte)
               : at::Tensor();
      text = ops::broadcast(comm, text, 0).contiguous();
      message.assign(static_cast<const char*>(text.data_ptr()), static_cast<size_t>(text.numel()));
      return;
    }
    if (info.at(0) != 0) return;
    const auto count = static_cast<size_t>(info.at(5));
    if (!root) fields.assign(count, at::Tensor());
    for (auto& t : fields) t = ops::broadcast(comm, t, 0);
  };
}

}  // namespace

std::shared_ptr<data::DataLoader> Session::make_dataloader(
    std::shared_ptr<data::Dataset> dataset) const {
  data::LoaderPlace place;
  place.rank = acc_->place().rank;
  place.world_size = acc_->place().world_size;
  place.device = acc_->device();
  place.state = acc_->gradient_state();
  if (acc_->communicator()) place.broadcast = dispatch_broadcast(weak_from_this());
  data::LoaderOptions defaults;
  defaults.split_batches = acc_->settings().flag("split_batches");
  defaults.even_batches = acc_->settings().flag("even_batches");
  if (const long long seed = acc_->settings().integer("data_seed"); seed >= 0)
    defaults.seed = static_cast<uint64_t>(seed);
  return std::make_shared<data::DataLoader>(std::move(dataset), place, defaults);
}

void Session::prepare_model(const std::shared_ptr<model::Model>& m, bool device_placement) {
  if (models_.count(m.get())) return;
  const bool empty = prepare_empty(*acc_, *m);  // stage 3 only; every rank alike
  if (!empty) m->require_filled("accel_prepare");
  auto* comm = acc_->communicator();
  auto params = trainable_parameters(*m);
  // Stages 2-3: the owners the model's optimizer will have (it is bound to these same parameters).
  std::vector<int> owners;
  if (comm && !params.empty() && acc_->sharding().stage >= 2) {
    std::vector<int64_t> sizes;
    for (const auto& p : params) sizes.push_back(p.numel() * p.element_size());
    owners = zero::assign_owners(sizes, comm->size());
  }
  std::vector<bool> sharded;  // an empty model's: decided before any parameter has storage
  if (empty) {
    sharded = zero::sharded_parameters(*m, params);
    allocate_shares(*m, params, owners, sharded, comm->rank(),
                    device_placement ? at::Device(acc_->device()) : at::Device(at::kCPU));
  }
  if (device_placement) {
    m->to(acc_->device());  // host tensors move in place, as Module.to
    placed_.insert(m.get());
  }
  m->host_tensors().pin();
  if (comm) {
    // Rank 0's values to every rank; an empty model's unloaded tensors have none yet (the load
    // gives every rank the same).
    std::vector<at::Tensor> state;
    for (const auto& [n, p] : m->named_parameters())
      if (!m->is_unloaded(p)) state.push_back(p);
    for (const auto& [n, b] : m->named_buffers())
      if (!m->is_unloaded(b)) state.push_back(b);
    ddp::broadcast_from_main(*comm, state, "the model's parameters and buffers",
                             /*verify=*/true);
    if (!owners.empty()) {
      if (acc_->sharding().stage >= 3) shard_parameters(*m, params, owners, sharded);
      syncs_[m.get()] = std::make_unique<zero::GradShard>(*comm, params, owners);
    } else if (!params.empty()) {
      syncs_[m.get()] = std::make_unique<ddp::GradSync>(*comm, params);
    }
  }
  models_[m.get()] = m;
  model_order_.push_back(m);
}

void Session::shard_parameters(model::Model& m, const std::vector<at::Tensor>& params,
                               const std::vector<int>& owners, const std::vector<bool>& sharded) {
  auto& comm = *acc_->communicator();
  auto shard =
      std::make_unique<zero::ParamShard>(comm, m, params, owners, acc_->sharding(), sharded);
  // What the policy chose and could not follow, said once (rank 0); the units under --debug.
  if (comm.rank() == 0) {
    auto& logger = acc_->logger();
    for (const auto& note : shard->units().notes)
      logger.say(logging::kWarning, "ZeRO stage 3: " + note);
    if (!m.host_tensors().empty())
      logger.say(logging::kInfo,
                 "ZeRO stage 3: the host's parameters stay whole on every rank (its own code "
                 "reads them); their gradients and optimizer state are sharded");
    if (acc_->settings().flag("debug")) {
      const auto& units = shard->units().units;
      std::string text = "ZeRO stage 3: " + std::to_string(units.size()) + " unit(s): root (" +
                         std::to_string(units[0].params.size()) + " parameters)";
      for (size_t u = 1; u < units.size(); ++u)
        text += ", " + units[u].name + " (" + std::to_string(units[u].params.size()) + ")";
      logger.say(logging::kInfo, text + "; prefetching the next unit: " + shard->prefetching());
    }
  }
  param_shards_[&m] = std::move(shard);
  // The storage the shard just released sits in the tensor allocator's cache (malloc_tuning)
  // until the first optimizer step: give it back now, so a rank holds its part from here on.
  runtime::release_cached_tensor_memory();
}

zero::ParamShard* Session::param_shard_of(const model::Model& m) const {
  const auto it = param_shards_.find(&m);
  return it == param_shards_.end() ? nullptr : it->second.get();
}

Session::WholeParameters::WholeParameters(Session& s) : s_(s) {
  // Nothing of an empty model prepared under stage 3 is worth gathering before it is loaded:
  // refused on every rank alike, before the first collective.
  for (const auto& m : s_.model_order_) m->require_filled("gathering the whole model");
  for (const auto& m : s_.model_order_)
    if (auto* shard = s_.param_shard_of(*m)) shard->gather_all();
}

Session::WholeParameters::~WholeParameters() {
  // Nothing is in flight after gather_all, so releasing only frees memory; quietly all the same.
  for (const auto& m : s_.model_order_)
    if (auto* shard = s_.param_shard_of(*m)) shard->release_all_quietly();
}

void Session::prepare_optimizer(const std::shared_ptr<optim::Optimizer>& o,
                                const std::shared_ptr<model::Model>& m) {
  if (!optimizers_.count(o.get())) {
    o->bind(trainable_parameters(*m));  // the placed parameters
    if (auto* comm = acc_->communicator(); comm && acc_->sharding().stage >= 1) {
      auto shard = std::make_unique<zero::OptimizerShard>(*comm, o->params());
      o->shard(shard->owned());
      shards_[o.get()] = std::move(shard);
    }
    optimizers_[o.get()] = o;
    optimizer_order_.push_back(o);
  }
}

void Session::prepare_scheduler(const std::shared_ptr<optim::LrScheduler>& s) {
  if (!schedulers_.count(s.get())) scheduler_order_.push_back(s);
  schedulers_[s.get()] = s;
}

void Session::prepare_dataloader(const std::shared_ptr<data::DataLoader>& l) {
  if (std::find(loader_order_.begin(), loader_order_.end(), l) == loader_order_.end())
    loader_order_.push_back(l);
}

void Session::broadcast_buffers(const model::Model& m) {
  // Every forward starts from rank 0's buffers (DDP's broadcast_buffers), in eval mode too, so that
  // every rank evaluates with the same batch-norm statistics.
  auto* comm = acc_->communicator();
  if (!comm) return;
  std::vector<at::Tensor> buffers;
  for (const auto& [n, b] : m.named_buffers()) buffers.push_back(b);
  if (!buffers.empty())
    ddp::broadcast_from_main(*comm, buffers, "the model's buffers", /*verify=*/false);
}

void Session::check_host_tensors() const {
  for (const auto& m : model_order_) m->host_tensors().check();
}

// The accelerator's autocast, entered on this thread until the result is destroyed; null when
// mixed precision is off.
static std::unique_ptr<AutocastScope> enter_autocast(const runtime::Accelerator& acc) {
  const auto mp = acc.mixed_precision();
  if (mp == runtime::MixedPrecision::kNo) return nullptr;
  return std::make_unique<AutocastScope>(
      acc.device() != "cpu", mp == runtime::MixedPrecision::kBf16 ? at::kBFloat16 : at::kHalf);
}

void Session::forward_begin(model::Model& m) {
  check_host_tensors();
  broadcast_buffers(m);
  open_forwards.emplace_back(&m, enter_autocast(*acc_));
}

void begin_unprepared_forward(const model::Model& m) {
  open_forwards.emplace_back(&m, nullptr);
}

void end_host_forward(const model::Model& m) {
  if (open_forwards.empty() || open_forwards.back().first != &m)
    fail(Errc::state,
         open_forwards.empty()
             ? "accel_model_forward_end without accel_model_forward_begin on this thread"
             : "accel_model_forward_end of another model than the innermost "
               "accel_model_forward_begin on this thread (end them in reverse order)");
  open_forwards.pop_back();  // leaves the autocast scope
}

std::vector<at::Tensor> Session::call(model::Model& m, const std::string& method,
                                      const std::vector<at::Tensor>& inputs) {
  // Before any collective: an empty model prepared under stage 3 is refused on every rank alike.
  m.require_filled("the model's '" + method + "'");
  broadcast_buffers(m);
  // A placed model's inputs follow it to the device, as DistributedDataParallel's forward moves
  // them: a C program's tensors are made on the host, and LibTorch would refuse the mix.
  std::vector<at::Tensor> placed;
  const bool move = placed_.count(&m) > 0;
  if (move) {
    const at::Device device(acc_->device());
    placed.reserve(inputs.size());
    for (const auto& t : inputs)
      placed.push_back(t.defined() && t.device() != device ? t.to(device) : t);
  }
  // Stage 3: the root's parameters for the call, each unit's around its own forward.
  zero::ParamShard* shard = param_shard_of(m);
  if (shard) shard->begin_forward();
  std::vector<at::Tensor> out;
  try {
    const auto scope = enter_autocast(*acc_);  // null without mixed precision
    out = m.call(method, move ? placed : inputs);
  } catch (...) {
    if (shard) shard->end_forward_after_failure();
    throw;
  }
  if (shard) shard->end_forward();
  if (acc_->mixed_precision() == runtime::MixedPrecision::kNo) return out;
  for (auto& t : out)
    if (t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf) t = t.to(at::kFloat);
  return out;
}

void Session::no_sync_end(const model::Model& m) {
  auto it = no_sync_.find(&m);
  if (it == no_sync_.end()) fail(Errc::state, "no_sync end without a no_sync begin for this model");
  if (--it->second == 0) no_sync_.erase(it);
}

void Session::accumulate() {
  ++total_steps_;
  const int64_t steps = acc_->gradient_accumulation_steps();
  const auto active = acc_->gradient_state()->active();
  if (active && active->end_of_dataloader && sync_with_dataloader_) {
    micro_step_ = 0;
    sync_gradients_ = true;
  } else {
    ++micro_step_;
    sync_gradients_ = micro_step_ % steps == 0;
  }
}

void Session::backward(const at::Tensor& loss, bool per_window) {
  if (!loss.defined()) fail(Errc::invalid_argument, "the loss is an undefined tensor");
  if (loss.numel() != 1)
    fail(Errc::shape, "backward needs a one-element loss; this one has " +
                          std::to_string(loss.numel()) + " elements");
  if (!loss.requires_grad())
    fail(Errc::invalid_argument,
         "the loss does not require grad: it was not computed from the "
         "model's parameters (or was computed in eval mode under no_grad)");
  if (acc_->communicator() && syncs_.empty())
    fail(Errc::state, "no model is prepared: gradients would not be averaged across the " +
                          std::to_string(acc_->place().world_size) +
                          " processes; pass the model to accel_prepare first");
  check_host_tensors();
  const int64_t steps = acc_->gradient_accumulation_steps();
  at::Tensor scaled = steps > 1 && !per_window ? loss / static_cast<double>(steps) : loss;
  if (scaler_) scaled = scaler_->scale_loss(scaled);
  if (join_.enabled && sync_gradients_) join_count_step();
  // GradientAccumulationPlugin's sync_each_batch: every micro-step reduces (less memory held by
  // unsynchronised gradients), while optimizers still step on sync steps only.
  const bool reduce_now = sync_gradients_ || sync_each_batch_;
  // In prepare order, the same on every rank: the buckets left to launch go out in one order.
  for (const auto& m : model_order_)
    if (auto it = syncs_.find(m.get()); it != syncs_.end())
      it->second->begin_backward(reduce_now && !no_sync_.count(m.get()));
  // Stage 3: the root's parameters for the whole backward, each unit's from when backward
  // reaches it until its gradients are in; released after, whatever happens.
  const auto release_after_failure = [this] {
    for (const auto& [model, shard] : param_shards_) shard->end_backward_after_failure();
  };
  try {
    for (const auto& m : model_order_)
      if (auto* shard = param_shard_of(*m)) shard->begin_backward();
    scaled.backward();
  } catch (const accel::Error&) {
    release_after_failure();
    throw;
  } catch (const std::exception& e) {
    release_after_failure();
    auto* ce = dynamic_cast<const c10::Error*>(&e);
    const char* what = ce ? ce->what_without_backtrace() : e.what();
    fail(is_out_of_memory_message(what) ? Errc::out_of_memory : Errc::torch,
         std::string("backward failed: ") + what);
  }
  for (const auto& [model, shard] : param_shards_) shard->end_backward();
  for (const auto& m : model_order_)
    if (auto it = syncs_.find(m.get()); it != syncs_.end()) it->second->end_backward();
}

void Session::unscale_for(const std::vector<at::Tensor>& params) {
  if (scaler_) scaler_->unscale(params);
}

void Session::optimizer_step(optim::Optimizer& o) {
  if (!sync_gradients_) return;  // an accumulation micro-step
  for (const auto& m : model_order_)
    if (m->has_unloaded() && o.bound())
      for (const auto& p : o.params())
        if (m->is_unloaded(p)) m->require_filled("accel_optimizer_step");
  check_host_tensors();
  bool stepped = true;
  if (scaler_) {
    // Every rank skips alike: they see the same averaged gradients, or (stage 2) agree.
    stepped = scaler_->step(o.params(), [&] { o.step(); });
    if (stepped)
      skipped_.erase(&o);
    else
      skipped_.insert(&o);
  } else {
    o.step();
  }
  // Stages 1-2 take every parameter from its owner. Stage 3 leaves the parameters it shards with
  // their owners (each unit gathers them for its forward) and takes the others, which stay whole
  // on every rank (the host's, tied ones), from theirs.
  if (auto it = shards_.find(&o); it != shards_.end() && stepped) {
    if (acc_->sharding().stage < 3)
      it->second->gather_parameters();
    else
      it->second->gather_parameters([this](const at::Tensor& p) {
        for (const auto& [model, shard] : param_shards_)
          if (shard->shards(p)) return false;
        return true;
      });
  }
  runtime::tensor_memory_step_ended();
}

bool Session::zero_gradient_in_place(const at::Tensor& param) {
  for (const auto& [model, sync] : syncs_)
    if (sync->zero_grad_in_place(param)) return true;
  return false;
}

void Session::optimizer_zero_grad(optim::Optimizer& o) {
  if (!sync_gradients_) return;
  o.zero_grad([this](const at::Tensor& p) { return zero_gradient_in_place(p); });
}

bool Session::step_was_skipped(const optim::Optimizer& o) const {
  return skipped_.count(&o) > 0;
}

void Session::scheduler_step(optim::LrScheduler& s) {
  optim::SchedulerStepContext c;
  c.step_with_optimizer = acc_->settings().flag("step_scheduler_with_optimizer");
  c.sync_gradients = sync_gradients_;
  // As Accelerate: the scheduler's own optimizer decides when it is prepared; otherwise any
  // prepared optimizer whose fp16 step was skipped holds the schedule back.
  const optim::Optimizer* own = s.optimizer().get();
  c.optimizer_skipped = optimizers_.count(own) ? skipped_.count(own) > 0 : !skipped_.empty();
  // A schedule is written in single-process steps; N processes take N times fewer steps over the
  // same data, unless every process sees the whole (split) batch.
  c.split_batches = acc_->settings().flag("split_batches");
  c.num_processes = acc_->place().world_size;
  const int times = optim::scheduler_advances(c);
  for (int i = 0; i < times; ++i) {
    const int64_t limit = s.schedule().max_steps();
    // As Accelerate, never past one_cycle's end. (Accelerate's adjust_scheduler would count
    // micro-steps here, but it never reaches GradientState: see the key in accel.h.)
    if (limit >= 0 && s.steps() + 1 > limit) break;
    s.step();
  }
}

// Stage 2: each rank holds the gradients it owns. Every rank's per-parameter norms travel to all
// (exactly: one rank's value plus zeros), and the total is taken over the same values in the same
// order as without sharding, so it is the same number.
at::Tensor Session::sharded_norm(const std::vector<at::Tensor>& params, double norm_type) {
  // One collective: the norms, then a 1 for each parameter whose gradient some rank holds.
  const auto n = static_cast<int64_t>(params.size());
  at::Tensor both = at::zeros({2 * n}, at::kFloat);
  for (int64_t k = 0; k < n; ++k) {
    const at::Tensor& g = params[static_cast<size_t>(k)].grad();
    if (!g.defined()) continue;
    const at::Tensor norm = std::isinf(norm_type) ? g.abs().max() : g.norm(norm_type);
    both[k] = norm.to(at::kCPU, at::kFloat);
    both[n + k] = 1.0F;
  }
  acc_->communicator()->all_reduce(both, runtime::ReduceOp::kSum);
  const at::Tensor stacked = both.narrow(0, 0, n).masked_select(both.narrow(0, n, n).gt(0));
  if (stacked.numel() == 0) return {};
  return std::isinf(norm_type) ? stacked.max() : stacked.norm(norm_type);
}

double Session::clip_grad_norm(model::Model& m, double max_norm, double norm_type) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    fail(Errc::invalid_argument,
         "max_norm must be a finite positive number, not " + format_real(max_norm));
  if (!(norm_type > 0))
    fail(Errc::invalid_argument,
         "norm_type must be positive (or infinity), not " + format_real(norm_type));
  const auto params = trainable_parameters(m);
  unscale_for(params);
  // PyTorch's clip_grad_norm_: the norm of the per-parameter norms, then every gradient times
  // min(1, max_norm / (total + 1e-6)).
  at::NoGradGuard no_grad;
  at::Tensor total;
  const auto path = syncs_.find(&m);
  if (path != syncs_.end() && dynamic_cast<const zero::GradShard*>(path->second.get())) {
    total = sharded_norm(params, norm_type);
    if (!total.defined()) return 0.0;
  } else {
    std::vector<at::Tensor> norms;
    for (const auto& p : params)
      if (p.grad().defined())
        norms.push_back(std::isinf(norm_type) ? p.grad().abs().max() : p.grad().norm(norm_type));
    if (norms.empty()) return 0.0;
    const at::Tensor stacked = at::stack(norms);
    total = std::isinf(norm_type) ? stacked.max() : stacked.norm(norm_type);
  }
  const at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (const auto& p : params)
    if (p.grad().defined()) p.grad().mul_(coef);
  return total.item<double>();
}

void Session::clip_grad_value(model::Model& m, double clip_value) {
  if (!(clip_value > 0) || !std::isfinite(clip_value))
    fail(Errc::invalid_argument,
         "clip_value must be a finite positive number, not " + format_real(clip_value));
  const auto params = trainable_parameters(m);
  unscale_for(params);
  at::NoGradGuard no_grad;
  for (const auto& p : params)
    if (p.grad().defined()) p.grad().clamp_(-clip_value, clip_value);
}

}  // namespace accel::prepare
