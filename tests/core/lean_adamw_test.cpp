// LeanAdamW (libaccel's AdamW, one temporary fewer) against the LibTorch it is built with: the
// same parameters and state, bit for bit, with and without weight decay and amsgrad, through
// parameters that get no gradient on some steps.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include "compat/optim_state.hpp"
#include "optim/lean_adamw.hpp"

namespace {

std::vector<at::Tensor> fresh_params() {
  at::manual_seed(7);
  return {at::randn({33, 17}).requires_grad_(true), at::randn({17}).requires_grad_(true),
          at::randn({5, 3, 2}).requires_grad_(true)};
}

void run_steps(torch::optim::Optimizer& opt, std::vector<at::Tensor>& params, int steps) {
  at::manual_seed(11);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    for (size_t i = 0; i < params.size(); ++i) {
      // The last parameter skips every third step: its state must not advance then.
      if (i == 2 && s % 3 == 1) continue;
      params[i].mutable_grad() = at::randn(params[i].sizes()) * (s + 1);
    }
    opt.step();
  }
}

}  // namespace

TEST(LeanAdamW, EqualsLibTorchsAdamWBitForBit) {
  for (const bool amsgrad : {false, true})
    for (const double decay : {0.0, 0.05}) {
      const auto options = torch::optim::AdamWOptions(3e-3)
                               .betas({0.8, 0.95})
                               .eps(1e-6)
                               .weight_decay(decay)
                               .amsgrad(amsgrad);
      auto theirs = fresh_params(), ours = fresh_params();
      torch::optim::AdamW reference(theirs, options);
      accel::optim::LeanAdamW lean(ours, options);
      run_steps(reference, theirs, 12);
      run_steps(lean, ours, 12);
      for (size_t i = 0; i < ours.size(); ++i) {
        EXPECT_TRUE(at::equal(ours[i], theirs[i]))
            << "parameter " << i << ", amsgrad " << amsgrad << ", weight decay " << decay;
        const auto& a = static_cast<torch::optim::AdamWParamState&>(
            *lean.state().at(accel::compat::optim_state_key(ours[i])));
        const auto& b = static_cast<torch::optim::AdamWParamState&>(
            *reference.state().at(accel::compat::optim_state_key(theirs[i])));
        EXPECT_EQ(a.step(), b.step());
        EXPECT_TRUE(at::equal(a.exp_avg(), b.exp_avg()));
        EXPECT_TRUE(at::equal(a.exp_avg_sq(), b.exp_avg_sq()));
        EXPECT_EQ(a.max_exp_avg_sq().defined(), amsgrad);
        if (amsgrad) EXPECT_TRUE(at::equal(a.max_exp_avg_sq(), b.max_exp_avg_sq()));
      }
    }
}
