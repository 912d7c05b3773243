// How a prepared model's gradients travel between the ranks in a backward: stage 0's bucket views
// (ddp::GradSync) or stage 2's owner-kept shards (zero::GradShard). The session drives either.
#pragma once

#include <ATen/core/Tensor.h>

namespace accel::ddp {

class GradientPath {
 public:
  virtual ~GradientPath() = default;
  // Before backward; `sync` false is an accumulation micro-step (a path may communicate anyway).
  virtual void begin_backward(bool sync) = 0;
  // After backward: every gradient this rank keeps is averaged across the ranks.
  virtual void end_backward() = 0;
  // A rank that has joined (join_uneven_inputs) answers one synchronised backward of the others.
  virtual void shadow_backward() = 0;
  // True, having zeroed it in place, when `param`'s .grad belongs to this path (it must survive
  // zero_grad); false leaves zeroing to the optimizer.
  virtual bool zero_grad_in_place(const at::Tensor& param) = 0;
};

}  // namespace accel::ddp
