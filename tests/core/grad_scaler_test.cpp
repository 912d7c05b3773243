// The fp16 loss scaler's rules (PyTorch's GradScaler): unscale once per step, inf/nan found ->
// the step is skipped and the scale backs off, growth after growth_interval good steps.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

#include "optim/grad_scaler.hpp"

using accel::optim::GradScaler;

namespace {
at::Tensor param_with_grad(std::vector<float> grad) {
  at::Tensor p = at::zeros({static_cast<int64_t>(grad.size())}).requires_grad_(true);
  p.mutable_grad() = at::tensor(grad);
  return p;
}
}  // namespace

TEST(GradScaler, ScalesUnscalesOnceAndBacksOffOnInf) {
  GradScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.scale_loss(at::ones({})).item<double>(), 65536.0);
  at::Tensor p = param_with_grad({65536.0f, -131072.0f});
  EXPECT_FALSE(s.unscale({p}));
  EXPECT_TRUE(s.unscale({p}) == false && p.grad()[0].item<float>() == 1.0f)
      << "a second unscale in the same step changes nothing";
  EXPECT_EQ(p.grad()[1].item<float>(), -2.0f);
  s.update();
  EXPECT_EQ(s.scale(), 65536.0);
  at::Tensor bad = param_with_grad({1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_TRUE(s.unscale({bad}));
  s.update();
  EXPECT_EQ(s.scale(), 32768.0) << "x0.5 after inf";
  at::Tensor nan = param_with_grad({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_TRUE(s.unscale({nan}));
  s.update();
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(GradScaler, GrowsAfterTheIntervalOfGoodSteps) {
  GradScaler s;
  s.growth_interval = 3;
  for (int i = 0; i < 3; ++i) {
    at::Tensor p = param_with_grad({1.0f});
    EXPECT_FALSE(s.unscale({p}));
    s.update();
  }
  EXPECT_EQ(s.scale(), 131072.0) << "x2 after 3 good steps";
  at::Tensor bad = param_with_grad({std::numeric_limits<float>::infinity()});
  s.unscale({bad});
  s.update();
  at::Tensor p = param_with_grad({1.0f});
  s.unscale({p});
  s.update();
  EXPECT_EQ(s.scale(), 65536.0) << "an inf resets the growth count";
}

TEST(GradScaler, StepSkipsTheOptimizerOnInfAndStepsOtherwise) {
  GradScaler s;
  int steps = 0;
  at::Tensor good = param_with_grad({65536.0f});
  EXPECT_TRUE(s.step({good}, [&] { ++steps; }));
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(good.grad()[0].item<float>(), 1.0f) << "the optimizer saw unscaled gradients";
  at::Tensor bad = param_with_grad({std::numeric_limits<float>::infinity()});
  EXPECT_FALSE(s.step({bad}, [&] { ++steps; }));
  EXPECT_EQ(steps, 1) << "skipped";
  EXPECT_EQ(s.scale(), 32768.0);
}
