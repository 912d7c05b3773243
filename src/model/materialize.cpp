#include "model/materialize.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>

#include "common/error.hpp"

namespace accel::model {

namespace {

// set_data's step for a tensor whose device changes: a gradient accumulator made for the old
// metadata must not receive gradients of the new.
void reset_grad_accumulator(const at::Tensor& t) {
  if (auto* meta = torch::autograd::impl::get_autograd_meta(t)) {
    std::lock_guard<std::mutex> lock(meta->mutex_);
    meta->grad_accumulator_.reset();
  }
}

void shallow_copy(const at::Tensor& t, const at::Tensor& value) {
  if (t.sizes() != value.sizes())
    fail(Errc::internal, "an empty tensor filled with a value of another shape");
  reset_grad_accumulator(t);
  t.unsafeGetTensorImpl()->shallow_copy_from(value.getIntrusivePtr());
}

}  // namespace

void materialize(const at::Tensor& t, const at::Tensor& value) {
  if (!is_empty(t)) fail(Errc::internal, "materialize: the tensor is not empty");
  if (value.is_meta()) fail(Errc::internal, "materialize: the value is empty");
  shallow_copy(t, value.detach());
}

void make_empty(const at::Tensor& t) {
  if (!t.defined() || is_empty(t)) return;
  shallow_copy(t, at::empty(t.sizes(), t.options().device(at::kMeta)));
}

std::string how_to_fill() {
  return "fill it with accel_load_pretrained or accel_load_checkpoint_in_model (a layer model "
         "built with accel_model_new_empty gets its layer's initialisation for a tensor the "
         "checkpoint lacks when the load is not strict); a host's own tensor may also be filled by "
         "the host (accel.hpp's accel::materialize)";
}

}  // namespace accel::model
