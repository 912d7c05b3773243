// An empty model prepared under ZeRO stage 3 (prepare/empty_model.hpp): tensors allocated for
// this rank's share but not yet written, which require_filled refuses until a load marks them.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "common/error.hpp"
#include "model/materialize.hpp"
#include "model/model.hpp"

namespace accel::model {

void Model::allocate_unloaded(const at::Tensor& t, const at::Tensor& value) {
  materialize(t, value);
  unloaded_.insert(t.unsafeGetTensorImpl());
  may_be_empty_ = true;
}

void Model::mark_loaded(const std::vector<std::string>& names) {
  if (unloaded_.empty()) return;
  const std::unordered_set<std::string> wanted(names.begin(), names.end());
  for (const auto& [n, t] : named_tensors())
    if (wanted.count(n)) unloaded_.erase(t.unsafeGetTensorImpl());
}

std::vector<std::string> Model::initialize_unloaded() {
  std::vector<std::string> done;
  if (unloaded_.empty()) return done;
  c10::NoGradGuard no_grad;
  for (const auto& [n, t] : named_tensors()) {
    const auto it = inits_.find(n);
    if (it == inits_.end() || !unloaded_.count(t.unsafeGetTensorImpl())) continue;
    // Drawn whole on the CPU, as initialize_empty draws it, on every rank: the generator advances
    // alike everywhere; only the rank that holds the tensor keeps the values.
    const bool held = t.numel() == 0 || t.storage().nbytes() > 0;
    if (held && t.device().is_cpu() && t.is_contiguous()) {
      at::Tensor in_place = t;
      it->second(in_place);
    } else {
      at::Tensor value = at::empty(t.sizes(), t.options().device(at::kCPU));
      it->second(value);
      if (held) at::Tensor(t).copy_(value);
    }
    unloaded_.erase(t.unsafeGetTensorImpl());
    done.push_back(n);
  }
  return done;
}

}  // namespace accel::model
