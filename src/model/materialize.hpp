// Empty (meta) tensors, Accelerate's init_empty_weights: a tensor with a shape and a dtype but no
// storage, filled later in place. In place means the same tensor object (TensorImpl): whoever holds
// it (a TorchScript module's slot, a host's torch::nn::Module member, an optimizer) sees the
// filled tensor, as torch.nn.Module.to's `param.data = ...` keeps the Parameter object.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace accel::model {

// Whether `t` is empty: on LibTorch's meta device, no storage behind it.
inline bool is_empty(const at::Tensor& t) {
  return t.defined() && t.is_meta();
}

// Gives the empty tensor `t` the storage, dtype and device of `value` (same shape), keeping `t`'s
// autograd identity (requires_grad, leaf, hooks, version counter) as Tensor::set_data does.
// LibTorch refuses set_data from meta (its compatible-type check lists dense backends without
// meta, 1.13 and 2.x alike), so this is set_data's own body. accel::Error(internal) when `t` is not
// empty or the shapes differ.
void materialize(const at::Tensor& t, const at::Tensor& value);

// The other way: `t`'s storage dropped for a meta one of its shape and dtype, in place (a host's
// module built on the CPU and emptied layer by layer: LibTorch's Module::to(kMeta) throws, set_data
// refusing the meta tensor).
void make_empty(const at::Tensor& t);

// The text every "still empty" error ends with: how each kind of model fills its tensors.
std::string how_to_fill();

}  // namespace accel::model
