#include "optim/grad_scaler.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace accel::optim {

at::Tensor GradScaler::scale_loss(const at::Tensor& loss) const {
  return loss * scale_;
}

bool GradScaler::unscale(const std::vector<at::Tensor>& params) {
  if (unscaled_) return found_inf_;
  const double inv = 1.0 / scale_;
  c10::NoGradGuard no_grad;
  // Each gradient is checked before it is scaled (scaling by more than 1 could overflow a finite
  // fp16 value), and the verdict is kept on the gradients' device: one host synchronisation per
  // step, not one per parameter (which on a GPU would stall the stream each time).
  at::Tensor any_bad;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    at::Tensor bad = g.isfinite().all().logical_not();
    if (!any_bad.defined())
      any_bad = bad;
    else
      any_bad = any_bad.logical_or(bad.to(any_bad.device()));
    g.mul_(inv);
  }
  bool found = any_bad.defined() && any_bad.item<bool>();
  if (agree) found = agree(found);
  unscaled_ = true;
  found_inf_ = found;
  return found;
}

void GradScaler::update() {
  if (found_inf_) {
    scale_ *= backoff_factor;
    tracker_ = 0;
  } else if (++tracker_ == growth_interval) {
    scale_ *= growth_factor;
    tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace accel::optim
