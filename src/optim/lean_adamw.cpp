#include "optim/lean_adamw.hpp"

#include <c10/core/GradMode.h>

#include <cmath>

#include "compat/optim_state.hpp"

namespace accel::optim {

torch::Tensor LeanAdamW::step(LossClosure closure) {
  c10::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    c10::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "AdamW does not support sparse gradients");
      if (options.weight_decay() != 0) p.mul_(1 - options.lr() * options.weight_decay());
      auto it = state_.find(compat::optim_state_key(p));
      if (it == state_.end()) {  // inserted only once complete: no empty entry if this throws
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(compat::optim_state_key(p), std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
      state.step(state.step() + 1);
      const auto [beta1, beta2] = options.betas();
      const double bias_correction1 = 1 - std::pow(beta1, state.step());
      const double bias_correction2 = 1 - std::pow(beta2, state.step());
      state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
      state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      at::Tensor second = state.exp_avg_sq();
      if (options.amsgrad()) {
        at::max_out(state.max_exp_avg_sq(), state.exp_avg_sq(), state.max_exp_avg_sq());
        second = state.max_exp_avg_sq();
      }
      at::Tensor denom = second.sqrt();
      denom.div_(std::sqrt(bias_correction2)).add_(options.eps());
      p.addcdiv_(state.exp_avg(), denom, -options.lr() / bias_correction1);
    }
  }
  return loss;
}

}  // namespace accel::optim
