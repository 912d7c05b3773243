#include "bigmodel/disk_offload.hpp"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <map>

#include "bigmodel/checkpoint_headers.hpp"
#include "checkpoint/checkpoint_files.hpp"
#include "common/error.hpp"
#include "config/sharding.hpp"
#include "model/materialize.hpp"
#include "zero/units.hpp"

namespace accel::bigmodel {

namespace {

using Named = std::pair<std::string, at::Tensor>;

constexpr size_t kAlign = 64;

// The device of the map's entry that places `tensor` (the longest module or tensor name that is
// it or holds it); `entry` receives that name. Throws when none does.
std::string device_of(const DeviceMap& map, const std::string& tensor, std::string* entry) {
  const DeviceMap::value_type* best = nullptr;
  for (const auto& e : map) {
    const bool holds = e.first.empty() || e.first == tensor ||
                       tensor.compare(0, e.first.size() + 1, e.first + ".") == 0;
    if (holds && (!best || e.first.size() > best->first.size())) best = &e;
  }
  if (!best)
    fail(Errc::invalid_argument,
         "the device map places no module holding the model's tensor '" + tensor + "'");
  *entry = best->first;
  return best->second;
}

// The module whose forward brings an offloaded tensor in: the entry's module, the parent of a
// tensor entry, or for the root's entry the top-level module holding it. "" (the root's own
// tensors): none, the tensor stays loaded.
std::string unit_of(const std::string& entry, const std::string& tensor) {
  const auto last = tensor.rfind('.');
  if (entry == tensor) return last == std::string::npos ? "" : tensor.substr(0, last);
  if (entry.empty()) return last == std::string::npos ? "" : tensor.substr(0, tensor.find('.'));
  return entry;
}

bool floating(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

void check_in_checkpoint(const std::map<std::string, checkpoint::TensorSpec>& specs,
                         const std::string& name, const at::Tensor& t) {
  const auto it = specs.find(name);
  if (it == specs.end())
    fail(Errc::invalid_argument, "the checkpoint has no tensor '" + name +
                                     "' (dispatch loads each of the model's tensors from it)");
  if (it->second.shape != t.sizes().vec())
    fail(Errc::shape, "tensor '" + name + "' has shape " + c10::str(t.sizes()) +
                          " in the model and " + c10::str(c10::IntArrayRef(it->second.shape)) +
                          " in the checkpoint");
  if (floating(it->second.dtype) != t.is_floating_point())
    fail(Errc::dtype, "tensor '" + name + "' is " + std::string(c10::toString(t.scalar_type())) +
                          " in the model and " + it->second.dtype + " in the checkpoint");
}

torch::jit::Module submodule(const torch::jit::Module& root, const std::string& path) {
  torch::jit::Module m = root;
  size_t start = 0;
  while (start < path.size()) {
    const auto dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    m = m.attr(part).toModule();
    start = dot == std::string::npos ? path.size() : dot + 1;
  }
  return m;
}

// Throws unsupported when a unit's calls cannot be hooked (zero::choose_units' reasons).
void check_followable(const torch::jit::Module& root, const std::vector<std::string>& units) {
  if (units.empty()) return;
  config::ShardingPlan plan;
  plan.auto_wrap_policy = "TRANSFORMER_BASED_WRAP";
  for (const auto& u : units) {
    const auto type = submodule(root, u).type();
    plan.wrap_classes.push_back(type->name() ? type->name()->name() : "?");
  }
  std::vector<at::Tensor> params;
  for (const auto& p : root.named_parameters()) params.push_back(p.value);
  const auto chosen = zero::choose_units(root, params, plan);
  for (const auto& u : units) {
    bool found = false;
    for (const auto& c : chosen.units) found = found || c.name == u;
    if (found) continue;
    std::string why = "its calls cannot be followed";
    for (const auto& note : chosen.notes)
      if (note.rfind("'" + u + "'", 0) == 0) why = note;
    fail(Errc::unsupported, "module '" + u + "' cannot be offloaded to disk: " + why);
  }
}

// Released in place: the tensor keeps its sizes and every reference; no storage behind it.
void drop_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void lend_storage(const at::Tensor& t, void* data, size_t bytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(data, s->device()));
  s->set_nbytes(bytes);
}

}  // namespace

DiskOffload::DiskOffload(model::Model& model, const DeviceMap& map, const std::string& checkpoint)
    : reader_(checkpoint::checkpoint_files(checkpoint)) {
  std::vector<std::string> cpu;
  plan(model, map, cpu);
  std::vector<std::string> names;
  for (const auto& u : units_) names.push_back(u.name);
  // One unit in the buffer at a time: an offloaded module inside another would evict it mid-call.
  for (const auto& outer : names)
    for (const auto& inner : names)
      if (inner.rfind(outer + ".", 0) == 0)
        fail(Errc::unsupported, "module '" + inner + "' is inside module '" + outer +
                                    "', and both are offloaded to disk: map the outer one whole");
  check_followable(model.module(), names);
  for (auto& u : units_) {
    size_t offset = 0;
    for (auto& t : u.tensors) {
      t.offset = offset;
      t.bytes = static_cast<size_t>(t.tensor.numel()) * t.tensor.element_size();
      offset += (t.bytes + kAlign - 1) / kAlign * kAlign;
    }
    buffer_bytes_ = std::max(buffer_bytes_, offset);
  }
  buffer_ = at::empty({static_cast<int64_t>(std::max<size_t>(buffer_bytes_, 1))}, at::kByte);
  load_cpu(model, cpu);
  release_disk(model);
  hook(model);
}

// Where each tensor goes, every check made: units_ gets the disk tensors, `cpu` the others.
void DiskOffload::plan(model::Model& model, const DeviceMap& map, std::vector<std::string>& cpu) {
  std::map<std::string, checkpoint::TensorSpec> specs;
  for (const auto& s : reader_.specs()) specs.emplace(s.name, s);
  const auto all = model.named_tensors();
  std::map<std::string, size_t> index;
  for (const auto& [name, t] : all) {
    std::string entry;
    const std::string device = device_of(map, name, &entry);
    check_in_checkpoint(specs, name, t);
    const std::string unit = device == "disk" ? unit_of(entry, name) : "";
    if (unit.empty()) {
      cpu.push_back(name);
      continue;
    }
    int users = 0;
    for (const auto& other : all)
      users += other.second.storage().unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl();
    if (users > 1 || !t.is_contiguous() || t.storage_offset() != 0)
      fail(Errc::unsupported, "tensor '" + name +
                                  "' cannot be offloaded to disk: it shares storage with another "
                                  "tensor of the model (tied weights) or is a view; map its "
                                  "module to cpu");
    const auto [it, added] = index.emplace(unit, units_.size());
    if (added) units_.push_back({unit, nullptr, {}, 0});
    units_[it->second].tensors.push_back({name, t, 0, 0});
  }
}

// A read failing here leaves the model partly loaded (said in the error).
void DiskOffload::load_cpu(model::Model& model, const std::vector<std::string>& cpu) {
  for (const auto& [name, t] : model.named_tensors()) {
    if (std::find(cpu.begin(), cpu.end(), name) == cpu.end()) continue;
    try {
      if (model::is_empty(t)) {
        const at::Tensor value = at::empty(t.sizes(), t.options().device(at::kCPU));
        reader_.read_into(name, value);
        model.fill(t, value);
      } else {
        reader_.read_into(name, t);
      }
    } catch (const Error& e) {
      fail(e.code(), std::string(e.what()) + " (the model's cpu tensors are partly loaded)");
    }
  }
}

void DiskOffload::release_disk(model::Model& model) {
  for (auto& u : units_)
    for (auto& t : u.tensors) {
      // An empty tensor is given a CPU storage (the buffer's, lent) so that it can be released in
      // place like the others: nothing is allocated for it.
      if (model::is_empty(t.tensor))
        model.fill(t.tensor, at::from_blob(buffer_.data_ptr(), t.tensor.sizes(),
                                           t.tensor.options().device(at::kCPU)));
      drop_storage(t.tensor);
    }
  for (const auto& [name, p] : model.named_parameters()) {
    p.mutable_grad().reset();
    p.requires_grad_(false);
  }
}

void DiskOffload::hook(model::Model& model) {
  // Fresh copies of the methods (sharing the tensors), as ZeRO-3 does: a method already run keeps
  // the plan it was compiled to, without the hooks.
  model.module() = model.module().clone(/*inplace=*/true);
  for (size_t i = 0; i < units_.size(); ++i) {
    units_[i].object = submodule(model.module(), units_[i].name)._ivalue().get();
    zero::observe_unit(units_[i].object, this, i);
  }
  revision_ = model.revision() + 1;  // instrument in the first prepare_call
  prepare_call(model);
}

void DiskOffload::prepare_call(model::Model& model) {
  if (active_) release(units_[*active_]);  // left by a call that failed inside it
  if (revision_ == model.revision()) return;
  zero::UnitPlan plan;
  plan.units.push_back({});
  for (const auto& u : units_) plan.units.push_back({u.name, u.object, {}});
  zero::instrument(model.module(), plan);
  revision_ = model.revision();
}

DiskOffload::~DiskOffload() {
  for (const auto& u : units_) zero::forget_unit(u.object);
}

void DiskOffload::enter(size_t unit) {
  Unit& u = units_.at(unit);
  if (u.depth++ > 0) return;
  // One unit holds the buffer at a time; one left by a failed call gives it up.
  if (active_ && *active_ != unit) release(units_[*active_]);
  active_ = unit;
  auto* base = static_cast<char*>(buffer_.data_ptr());
  try {
    for (auto& t : u.tensors) {
      lend_storage(t.tensor, base + t.offset, t.bytes);
      reader_.read_into(t.name, t.tensor);
    }
  } catch (...) {
    release(u);
    throw;
  }
}

at::Tensor DiskOffload::exit(size_t unit, const at::Tensor& output) {
  Unit& u = units_.at(unit);
  if (--u.depth > 0) return output;
  at::Tensor out = output;
  for (const auto& t : u.tensors)
    if (output.has_storage() &&
        output.storage().unsafeGetStorageImpl() == t.tensor.storage().unsafeGetStorageImpl())
      out = output.clone();  // the unit returned its own weight: keep a copy past the release
  release(u);
  if (at::GradMode::is_enabled() && out.requires_grad())
    fail(Errc::unsupported, "module '" + u.name +
                                "' is offloaded to disk and its output requires grad: a model "
                                "dispatched with accel_dispatch_model is for inference only (the "
                                "module's weights are dropped after its forward)");
  return out;
}

void DiskOffload::release(Unit& u) noexcept {
  for (auto& t : u.tensors) drop_storage(t.tensor);
  u.depth = 0;
  if (active_ && &units_[*active_] == &u) active_.reset();
}

void DiskOffload::refuse_offloaded(const std::string& what, const std::string& name) const {
  for (const auto& u : units_)
    for (const auto& t : u.tensors)
      if (t.name == name || name.empty())
        fail(Errc::state, what + ": '" + name +
                              "' is offloaded to disk (accel_dispatch_model): it is read from the "
                              "checkpoint just before each forward of '" +
                              u.name + "' and dropped after it; read it from the checkpoint");
}

}  // namespace accel::bigmodel
