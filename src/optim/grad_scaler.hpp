// Dynamic loss scaling for fp16 (PyTorch's GradScaler): multiply the loss before backward, unscale
// and check the gradients before the step, skip the step and back off when any is inf/nan, grow the
// scale after `growth_interval` good steps. LibTorch 1.13's fused AMP kernels run on CUDA only, so
// this is written in plain ATen and works on any device.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace accel::optim {

class GradScaler {
 public:
  double scale() const { return scale_; }
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // Divides every gradient by the scale once per step; returns whether any is inf or nan.
  bool unscale(const std::vector<at::Tensor>& params);
  bool unscaled() const { return unscaled_; }
  // After a step (taken or skipped): back off on inf/nan, else count towards growth.
  void update();
  // PyTorch's scaler.step(optimizer) + scaler.update(): unscale (unless done already this step),
  // call `step` only when every gradient is finite, update the scale. Returns whether it stepped.
  template <class Step>
  bool step(const std::vector<at::Tensor>& params, Step&& optimizer_step) {
    const bool inf = unscale(params);
    if (!inf) optimizer_step();
    update();
    return !inf;
  }
  bool found_inf() const { return found_inf_; }
  int growth_tracker() const { return tracker_; }
  void restore(double scale, int tracker) {
    scale_ = scale;
    tracker_ = tracker;
  }

  double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
  // When each rank sees only part of the gradients (ZeRO stage 2): turns this rank's verdict into
  // the job's (true when any rank found inf/nan). A collective.
  std::function<bool(bool)> agree;
  int growth_interval = 2000;

 private:
  double scale_ = 65536.0;
  int tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace accel::optim
