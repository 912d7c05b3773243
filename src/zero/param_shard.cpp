#include "zero/param_shard.hpp"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>
#include <torch/script.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/error.hpp"
#include "ddp/buckets.hpp"
#include "zero/owner_gather.hpp"
#include "zero/unit_observer.hpp"

namespace accel::zero {

namespace {

// Which shard and unit a submodule object is, for the graph's hooks. An object not here (another
// model's, or one whose accelerator was freed) passes through them untouched.
struct Registered {
  ParamShard* shard;
  size_t unit;
};
std::mutex g_mutex;
std::unordered_map<const void*, Registered> g_units;

std::optional<Registered> find_unit(const c10::IValue& module) {
  if (!module.isObject()) return std::nullopt;
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_units.find(module.toObject().get());
  if (it == g_units.end()) return std::nullopt;
  return it->second;
}

// Units of another user of the hooks (unit_observer.hpp).
struct Observed {
  UnitObserver* observer;
  size_t unit;
};
std::unordered_map<const void*, Observed> g_observed;

std::optional<Observed> find_observed(const c10::IValue& module) {
  if (!module.isObject()) return std::nullopt;
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_observed.find(module.toObject().get());
  if (it == g_observed.end()) return std::nullopt;
  return it->second;
}

void unit_enter(const c10::IValue& module) {
  if (const auto r = find_unit(module))
    r->shard->enter(r->unit);
  else if (const auto o = find_observed(module))
    o->observer->enter(o->unit);
}

// The unit's output, unchanged; when backward reaches it, the unit is gathered again (a tensor
// hook, not an autograd Function: the output stays an ordinary tensor that the caller may modify
// in place).
at::Tensor unit_exit(const c10::IValue& module, const at::Tensor& output) {
  const auto r = find_unit(module);
  if (!r) {
    const auto o = find_observed(module);
    return o ? o->observer->exit(o->unit, output) : output;
  }
  r->shard->exit(r->unit);
  if (at::GradMode::is_enabled() && output.requires_grad())
    output.register_hook([module](const at::Tensor&) {
      if (const auto again = find_unit(module)) again->shard->backward_reached(again->unit);
    });
  return output;
}

// The ops' bodies: an accel::Error (a peer that died during a gather) is also kept for the model's
// caller, which the interpreter would otherwise hand a RuntimeError without its code.
template <class F>
auto keeping_errors(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    remember_op_error(e);
    throw;
  }
}

TORCH_LIBRARY(accel, m) {
  m.def(torch::schema("accel::unit_enter(Any module) -> ()", c10::AliasAnalysisKind::CONSERVATIVE),
        [](c10::IValue module) { keeping_errors([&] { unit_enter(module); }); });
  m.def(torch::schema("accel::unit_exit(Any module, Tensor output) -> Tensor",
                      c10::AliasAnalysisKind::CONSERVATIVE),
        [](c10::IValue module, at::Tensor output) {
          return keeping_errors([&] { return unit_exit(module, output); });
        });
}

// Released in place: the tensor keeps its sizes and every reference to it; its storage holds
// nothing until restore_storage.
void drop_storage(const at::Tensor& p) {
  c10::StorageImpl* s = p.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void restore_storage(const at::Tensor& p, size_t bytes) {
  c10::StorageImpl* s = p.storage().unsafeGetStorageImpl();
  c10::Allocator* a = s->allocator() ? s->allocator() : c10::GetAllocator(s->device_type());
  s->set_data_ptr_noswap(a->allocate(bytes));
  s->set_nbytes(bytes);
}

// Whether `p` can be released: the only user of its whole storage among the model's tensors.
bool shardable(const at::Tensor& p, const std::vector<std::pair<std::string, at::Tensor>>& all) {
  if (!p.is_contiguous() || p.storage_offset() != 0 ||
      p.storage().nbytes() != static_cast<size_t>(p.numel()) * p.element_size() || p.numel() == 0)
    return false;
  int users = 0;
  for (const auto& [name, t] : all)
    users += t.storage().unsafeGetStorageImpl() == p.storage().unsafeGetStorageImpl();
  return users == 1;
}

}  // namespace

std::vector<bool> sharded_parameters(const model::Model& model,
                                     const std::vector<at::Tensor>& params) {
  const auto all = model.named_tensors();
  std::vector<bool> out(params.size(), false);
  // The host's parameters stay whole: its own code reads them.
  if (!model.host_tensors().empty()) return out;
  for (size_t k = 0; k < params.size(); ++k) out[k] = shardable(params[k], all);
  return out;
}

void observe_unit(const void* object, UnitObserver* observer, size_t unit) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_observed[object] = {observer, unit};
}

void forget_unit(const void* object) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_observed.erase(object);
}

ParamShard::ParamShard(runtime::Communicator& comm, model::Model& model,
                       std::vector<at::Tensor> params, std::vector<int> owners,
                       const config::ShardingPlan& plan, std::vector<bool> sharded)
    : comm_(comm),
      model_(model),
      params_(std::move(params)),
      owners_(std::move(owners)),
      forward_prefetch_(plan.forward_prefetch && comm.overlaps_compute()),
      backward_prefetch_(plan.backward_prefetch && comm.overlaps_compute()) {
  sharded_ = sharded.empty() ? sharded_parameters(model_, params_) : std::move(sharded);
  bool any = false;
  for (size_t k = 0; k < params_.size(); ++k) {
    // A sharded parameter's storage is exactly its elements (shardable), whether or not this rank
    // was ever given them.
    const at::Tensor& p = params_[k];
    bytes_.push_back(sharded_[k] ? static_cast<size_t>(p.numel()) * p.element_size()
                                 : p.storage().nbytes());
    if (sharded_[k]) sharded_impls_.insert(p.unsafeGetTensorImpl());
    any = any || sharded_[k];
  }
  if (any) {
    // Fresh copies of the methods (sharing the tensors): a method already run keeps the plan it
    // was compiled to, without the hooks.
    model_.module() = model_.module().clone(/*inplace=*/true);
    plan_ = choose_units(model_.module(), params_, plan);
    instrument(model_.module(), plan_);
    instrumented_revision_ = model_.revision();
  } else {
    plan_.units.push_back({});
    for (size_t k = 0; k < params_.size(); ++k) plan_.units[0].params.push_back(k);
  }
  units_.resize(plan_.units.size());
  position_.assign(units_.size(), SIZE_MAX);
  unit_of_.assign(params_.size(), 0);
  for (size_t u = 0; u < plan_.units.size(); ++u) {
    Unit& unit = units_[u];
    for (size_t k : plan_.units[u].params) {
      unit_of_[k] = u;
      ++unit.trainable;
      if (!sharded_[k]) continue;
      unit.sharded.push_back(params_[k]);
      unit.owners.push_back(owners_[k]);
      if (owners_[k] != comm_.rank()) unit.foreign.push_back(k);
    }
    unit.whole = true;
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (size_t u = 1; u < plan_.units.size(); ++u) g_units[plan_.units[u].object] = {this, u};
  }
  hooks_ = std::make_unique<ddp::GradientHooks>(params_, [this](size_t k) { on_gradient(k); });
  release_all();
}

bool ParamShard::shards(const at::Tensor& p) const {
  return sharded_impls_.count(p.unsafeGetTensorImpl()) > 0;
}

ParamShard::~ParamShard() {
  hooks_.reset();
  std::lock_guard<std::mutex> lock(g_mutex);
  for (size_t u = 1; u < plan_.units.size(); ++u) g_units.erase(plan_.units[u].object);
}

std::string ParamShard::prefetching() const {
  if (forward_prefetch_ && backward_prefetch_) return "forward and backward";
  return forward_prefetch_ ? "forward" : backward_prefetch_ ? "backward" : "none";
}

void ParamShard::gather(size_t u) {
  Unit& unit = units_[u];
  if (unit.stranded)
    fail(Errc::state,
         "ZeRO stage 3: gathering a unit failed earlier (the process group is unusable since)");
  if (unit.in_flight) {
    auto coming = std::move(unit.in_flight);
    try {
      coming->finish();
    } catch (...) {
      unit.stranded = true;
      stranded_.push_back(std::move(coming));
      throw;
    }
    unit.whole = true;
    return;
  }
  if (unit.whole) return;
  for (size_t k : unit.foreign) restore_storage(params_[k], bytes_[k]);
  gather_from_owners(comm_, unit.sharded, unit.owners);
  unit.whole = true;
}

void ParamShard::prefetch(size_t u) {
  Unit& unit = units_[u];
  if (unit.whole || unit.in_flight) return;
  for (size_t k : unit.foreign) restore_storage(params_[k], bytes_[k]);
  unit.in_flight = std::make_unique<OwnerGather>(comm_, unit.sharded, unit.owners,
                                                 /*pipelined=*/true);
}

std::optional<size_t> ParamShard::neighbour(size_t u, int step) const {
  if (!order_known_ || position_[u] == SIZE_MAX) return std::nullopt;
  const auto at = static_cast<long long>(position_[u]) + step;
  if (at < 0 || at >= static_cast<long long>(order_.size())) return std::nullopt;
  return order_[static_cast<size_t>(at)];
}

void ParamShard::release(size_t u) {
  Unit& unit = units_[u];
  if (unit.stranded) return;
  if (unit.in_flight) gather(u);  // a collective under way is completed, then dropped
  if (!unit.whole) return;
  for (size_t k : unit.foreign) drop_storage(params_[k]);
  unit.whole = false;
}

void ParamShard::instrument_new_methods() {
  if (model_.revision() == instrumented_revision_) return;
  instrument(model_.module(), plan_);  // methods defined since prepare
  instrumented_revision_ = model_.revision();
}

void ParamShard::begin_forward() {
  instrument_new_methods();
  recording_ = !order_known_;
  gather(0);
  if (forward_prefetch_ && order_known_ && !order_.empty()) prefetch(order_.front());
}

void ParamShard::end_forward() {
  for (auto& unit : units_) unit.depth = 0;
  if (recording_) order_known_ = true;
  recording_ = false;
  release_all();
}

void ParamShard::end_forward_after_failure() noexcept {
  for (auto& unit : units_) unit.depth = 0;
  recording_ = false;  // a partial order is not the model's
  order_.clear();
  position_.assign(units_.size(), SIZE_MAX);
  release_all_quietly();
}

void ParamShard::release_all_quietly() noexcept {
  for (size_t u = 0; u < units_.size(); ++u) {
    try {
      release(u);
    } catch (...) {  // a gather in flight failed: that unit is stranded, the others go on
    }
  }
}

void ParamShard::begin_backward() {
  backward_ = true;
  for (auto& unit : units_) unit.pending = unit.trainable;
  gather(0);
  if (backward_prefetch_ && order_known_ && !order_.empty()) prefetch(order_.back());
}

void ParamShard::end_backward() {
  backward_ = false;
  release_all();
}

void ParamShard::end_backward_after_failure() noexcept {
  backward_ = false;
  release_all_quietly();
}

void ParamShard::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) gather(u);
}

void ParamShard::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void ParamShard::enter(size_t u) {
  if (recording_ && position_[u] == SIZE_MAX) {
    position_[u] = order_.size();
    order_.push_back(u);
  }
  ++units_[u].depth;
  gather(u);
  if (forward_prefetch_)
    if (const auto next = neighbour(u, 1)) prefetch(*next);
}

void ParamShard::exit(size_t u) {
  Unit& unit = units_[u];
  if (unit.depth > 0 && --unit.depth == 0) release(u);
}

void ParamShard::backward_reached(size_t u) {
  if (!backward_) return;
  gather(u);
  if (backward_prefetch_)
    if (const auto previous = neighbour(u, -1)) prefetch(*previous);
}

// Autograd accumulated parameter k's gradient: once a unit has all of its gradients, nothing in
// this backward reads its parameters again (each node reading one is upstream of its gradient).
void ParamShard::on_gradient(size_t k) {
  const size_t u = unit_of_[k];
  Unit& unit = units_[u];
  if (!backward_ || u == 0 || unit.pending == 0) return;
  if (--unit.pending == 0) release(u);
}

}  // namespace accel::zero
