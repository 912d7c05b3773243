#include "prepare/empty_model.hpp"

#include <ATen/ATen.h>

#include <string>
#include <unordered_set>

#include "common/error.hpp"
#include "model/materialize.hpp"
#include "ops/collectives.hpp"

namespace accel::prepare {

namespace {

struct Empty {
  size_t count = 0;
  std::string first;
};

Empty empty_tensors(const model::Model& m) {
  Empty e;
  for (const auto& [n, t] : m.named_tensors()) {
    if (!model::is_empty(t)) continue;
    if (e.first.empty()) e.first = n;
    ++e.count;
  }
  return e;
}

std::string named(const Empty& e) {
  return "'" + e.first + "'" +
         (e.count > 1 ? " and " + std::to_string(e.count - 1) + " other tensor(s)" : "") +
         " of the model " + (e.count > 1 ? "are" : "is") + " still empty";
}

// A tensor of `t`'s shape and dtype on `device` whose storage holds nothing: what stage 3 leaves
// of a parameter another rank owns (zero/param_shard.cpp's released storage), made without ever
// allocating its bytes.
at::Tensor released_like(const at::Tensor& t, const at::Device& device) {
  at::Tensor r = at::empty({0}, t.options().device(device));
  r.unsafeGetTensorImpl()->set_sizes_contiguous(t.sizes());
  return r;
}

}  // namespace

bool prepare_empty(runtime::Accelerator& acc, const model::Model& m) {
  const Empty e = empty_tensors(m);
  auto* comm = acc.communicator();
  if (comm) {  // every rank decides alike, or none goes on
    const auto counts = ops::gather_object(comm, std::to_string(e.count));
    for (size_t r = 1; r < counts.size(); ++r)
      if (counts[r] != counts[0])
        fail(Errc::state, "accel_prepare: the model has " + counts[0] +
                              " empty tensor(s) on rank 0 and " + counts[r] + " on rank " +
                              std::to_string(r) + ": build it alike on every rank");
  }
  if (e.count == 0) return false;
  if (!comm || acc.sharding().stage < 3)
    fail(Errc::state,
         "accel_prepare: " + named(e) +
             " (built without its weights): under this configuration every rank holds the "
             "whole model, so load it first (accel_load_pretrained or "
             "accel_load_checkpoint_in_model before accel_prepare), or prepare it empty under "
             "ZeRO stage 3 over several processes (zero_stage: 3, or FSDP's FULL_SHARD), where "
             "each rank allocates only its share and the load after accel_prepare fills it");
  if (!m.host_tensors().empty())
    fail(Errc::state,
         "accel_prepare: " + named(e) +
             ": a model of the host's tensors cannot be prepared empty (ZeRO stage 3 keeps the "
             "host's parameters whole on every rank); fill it first (load_pretrained, "
             "load_checkpoint or accel::materialize), then prepare");
  return true;
}

void allocate_shares(model::Model& m, const std::vector<at::Tensor>& params,
                     const std::vector<int>& owners, const std::vector<bool>& sharded, int rank,
                     const at::Device& device) {
  std::unordered_set<const void*> elsewhere;  // sharded parameters another rank owns
  for (size_t k = 0; k < params.size(); ++k)
    if (sharded[k] && owners[k] != rank) elsewhere.insert(params[k].unsafeGetTensorImpl());
  for (const auto& [n, t] : m.named_tensors()) {
    if (!model::is_empty(t)) continue;
    m.allocate_unloaded(t, elsewhere.count(t.unsafeGetTensorImpl())
                               ? released_like(t, device)
                               : at::empty(t.sizes(), t.options().device(device)));
  }
}

}  // namespace accel::prepare
