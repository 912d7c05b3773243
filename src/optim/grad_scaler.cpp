#include "optim/grad_scaler.hpp"

#include <ATen/ATen.h>

namespace accel::optim {

at::Tensor GradScaler::scale_loss(const at::Tensor& loss) const {
  return loss * scale_;
}

bool GradScaler::unscale(const std::vector<at::Tensor>& params) {
  if (unscaled_) return found_inf_;
  const double inv = 1.0 / scale_;
  bool found = false;
  at::NoGradGuard no_grad;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    if (!found && !g.isfinite().all().item<bool>()) found = true;
    g.mul_(inv);
  }
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
