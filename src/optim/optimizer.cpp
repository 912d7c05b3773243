#include "optim/optimizer.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "compat/optim_state.hpp"
#include "config/keys.hpp"
#include "optim/lean_adamw.hpp"

namespace accel::optim {

namespace {

// Each kind's options with PyTorch's defaults; booleans are stored as 0/1.
std::map<std::string, double> defaults_for(const std::string& kind) {
  if (kind == "sgd")
    return {{"lr", 1e-3}, {"momentum", 0}, {"dampening", 0}, {"weight_decay", 0}, {"nesterov", 0}};
  if (kind == "adam")
    return {{"lr", 1e-3},  {"beta1", 0.9},      {"beta2", 0.999},
            {"eps", 1e-8}, {"weight_decay", 0}, {"amsgrad", 0}};
  if (kind == "adamw")
    return {{"lr", 1e-3},  {"beta1", 0.9},         {"beta2", 0.999},
            {"eps", 1e-8}, {"weight_decay", 1e-2}, {"amsgrad", 0}};
  if (kind == "rmsprop")
    return {{"lr", 1e-2},        {"alpha", 0.99}, {"eps", 1e-8},
            {"weight_decay", 0}, {"momentum", 0}, {"centered", 0}};
  if (kind == "adagrad")
    return {{"lr", 1e-2},
            {"lr_decay", 0},
            {"weight_decay", 0},
            {"initial_accumulator_value", 0},
            {"eps", 1e-10}};
  fail(Errc::invalid_argument,
       "unknown optimizer '" + kind + "'; known: sgd, adam, adamw, rmsprop, adagrad");
}

bool is_flag(const std::string& key) {
  return key == "nesterov" || key == "amsgrad" || key == "centered";
}

}  // namespace

Optimizer::Optimizer(const std::string& kind) : kind_(kind), options_(defaults_for(kind)) {}

Optimizer::~Optimizer() = default;

double Optimizer::option(const std::string& key) const {
  auto it = options_.find(key);
  if (it == options_.end()) fail(Errc::invalid_argument, kind_ + " has no option '" + key + "'");
  return it->second;
}

void Optimizer::check_option(const std::string& key, double v,
                             const std::map<std::string, double>& all) const {
  const std::string where = "optimizer " + kind_ + ": '" + key + "'";
  if (!std::isfinite(v))
    fail(Errc::invalid_argument, where + " must be a finite number, not " + format_real(v));
  if (is_flag(key) && v != 0 && v != 1)
    fail(Errc::invalid_argument, where + " must be true or false");
  if (v < 0) fail(Errc::invalid_argument, where + " must not be negative");
  if ((key == "beta1" || key == "beta2" || key == "alpha") && v >= 1)
    fail(Errc::invalid_argument, where + " must be below 1");
  if (kind_ == "sgd" && key == "nesterov" && v != 0 &&
      (all.at("momentum") <= 0 || all.at("dampening") != 0))
    fail(Errc::invalid_argument, "sgd: nesterov needs momentum > 0 and dampening 0");
}

void Optimizer::set(const std::string& key, const std::string& value) {
  auto it = options_.find(key);
  if (it == options_.end()) {
    std::string known;
    for (const auto& [k, v] : options_) known += (known.empty() ? "" : ", ") + k;
    fail(Errc::invalid_argument,
         "optimizer " + kind_ + ": unknown option '" + key + "'; known: " + known);
  }
  double v = 0;
  if (is_flag(key)) {
    bool b = false;
    if (!config::parse_bool(value, &b))
      fail(Errc::invalid_argument,
           "optimizer " + kind_ + ": '" + key + "=" + value + "' is not true/false");
    v = b ? 1 : 0;
  } else if (!parse_real(value, &v)) {
    fail(Errc::invalid_argument,
         "optimizer " + kind_ + ": '" + key + "=" + value + "' is not a number");
  }
  check_option(key, v, options_);
  it->second = v;
  apply_options();
}

void Optimizer::bind(std::vector<at::Tensor> params) {
  if (params.empty()) fail(Errc::invalid_argument, "the optimizer has no parameters to optimise");
  params_ = std::move(params);
  owned_.assign(params_.size(), true);
  build(params_);
}

void Optimizer::shard(const std::vector<bool>& owned) {
  if (owned.size() != params_.size())
    fail(Errc::internal, "optimizer shard: one ownership flag per parameter expected");
  owned_ = owned;
  std::vector<at::Tensor> mine;
  for (size_t i = 0; i < params_.size(); ++i)
    if (owned_[i]) mine.push_back(params_[i]);
  build(mine);
}

void Optimizer::build(const std::vector<at::Tensor>& params) {
  const auto& o = options_;
  if (kind_ == "sgd") {
    impl_ = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.at("lr"))
                                                            .momentum(o.at("momentum"))
                                                            .dampening(o.at("dampening"))
                                                            .weight_decay(o.at("weight_decay"))
                                                            .nesterov(o.at("nesterov") != 0));
  } else if (kind_ == "adam") {
    impl_ = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.at("lr"))
                                                             .betas({o.at("beta1"), o.at("beta2")})
                                                             .eps(o.at("eps"))
                                                             .weight_decay(o.at("weight_decay"))
                                                             .amsgrad(o.at("amsgrad") != 0));
  } else if (kind_ == "adamw") {
    impl_ = std::make_unique<LeanAdamW>(params, torch::optim::AdamWOptions(o.at("lr"))
                                                              .betas({o.at("beta1"), o.at("beta2")})
                                                              .eps(o.at("eps"))
                                                              .weight_decay(o.at("weight_decay"))
                                                              .amsgrad(o.at("amsgrad") != 0));
  } else if (kind_ == "rmsprop") {
    impl_ = std::make_unique<torch::optim::RMSprop>(params, torch::optim::RMSpropOptions(o.at("lr"))
                                                                .alpha(o.at("alpha"))
                                                                .eps(o.at("eps"))
                                                                .weight_decay(o.at("weight_decay"))
                                                                .momentum(o.at("momentum"))
                                                                .centered(o.at("centered") != 0));
  } else {
    impl_ = std::make_unique<torch::optim::Adagrad>(
        params, torch::optim::AdagradOptions(o.at("lr"))
                    .lr_decay(o.at("lr_decay"))
                    .weight_decay(o.at("weight_decay"))
                    .initial_accumulator_value(o.at("initial_accumulator_value"))
                    .eps(o.at("eps")));
  }
}

// Writes the options into the live param group (LibTorch reads them at every step).
void Optimizer::apply_options() {
  if (!impl_) return;
  const auto& o = options_;
  auto& group = impl_->param_groups().at(0);
  if (kind_ == "sgd") {
    auto& g = static_cast<torch::optim::SGDOptions&>(group.options());
    g.lr(o.at("lr")).momentum(o.at("momentum")).dampening(o.at("dampening"));
    g.weight_decay(o.at("weight_decay")).nesterov(o.at("nesterov") != 0);
  } else if (kind_ == "adam") {
    auto& g = static_cast<torch::optim::AdamOptions&>(group.options());
    g.lr(o.at("lr")).betas({o.at("beta1"), o.at("beta2")}).eps(o.at("eps"));
    g.weight_decay(o.at("weight_decay")).amsgrad(o.at("amsgrad") != 0);
  } else if (kind_ == "adamw") {
    auto& g = static_cast<torch::optim::AdamWOptions&>(group.options());
    g.lr(o.at("lr")).betas({o.at("beta1"), o.at("beta2")}).eps(o.at("eps"));
    g.weight_decay(o.at("weight_decay")).amsgrad(o.at("amsgrad") != 0);
  } else if (kind_ == "rmsprop") {
    auto& g = static_cast<torch::optim::RMSpropOptions&>(group.options());
    g.lr(o.at("lr")).alpha(o.at("alpha")).eps(o.at("eps")).weight_decay(o.at("weight_decay"));
    g.momentum(o.at("momentum")).centered(o.at("centered") != 0);
  } else {
    auto& g = static_cast<torch::optim::AdagradOptions&>(group.options());
    g.lr(o.at("lr")).lr_decay(o.at("lr_decay")).weight_decay(o.at("weight_decay"));
    g.initial_accumulator_value(o.at("initial_accumulator_value")).eps(o.at("eps"));
  }
}

torch::optim::Optimizer& Optimizer::torch_optimizer() {
  if (!impl_) fail(Errc::state, "the optimizer is not bound to parameters yet");
  return *impl_;
}

void Optimizer::step() {
  torch_optimizer().step();
}

void Optimizer::zero_grad(const std::function<bool(const at::Tensor& param)>& in_place) {
  for (auto& p : params_)
    if (p.grad().defined() && !(in_place && in_place(p))) p.mutable_grad() = at::Tensor();
}

void Optimizer::set_lr(double lr) {
  check_option("lr", lr, options_);
  options_["lr"] = lr;
  apply_options();
}

bool Optimizer::has_momentum() const {
  return options_.count("momentum") || options_.count("beta1");
}

void Optimizer::set_momentum(double m) {
  options_[options_.count("beta1") ? "beta1" : "momentum"] = m;
  apply_options();
}

namespace {
compat::OptimStateKey key_of(const at::Tensor& p) {
  return compat::optim_state_key(p);
}
at::Tensor step_tensor(int64_t step) {
  return at::full({}, step, at::kLong);
}
}  // namespace

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!impl_) return out;
  auto& state = impl_->state();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = state.find(key_of(params_[i]));
    if (it == state.end()) continue;
    const std::string p = std::to_string(i) + ".";
    auto put = [&](const char* field, const at::Tensor& t) {
      if (t.defined()) out.emplace_back(p + field, t.detach().clone());
    };
    if (kind_ == "sgd") {
      put("momentum_buffer",
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
    } else if (kind_ == "adam" || kind_ == "adamw") {
      // Adam's and AdamW's states have the same fields.
      auto fields = [&](auto& s) {
        put("step", step_tensor(s.step()));
        put("exp_avg", s.exp_avg());
        put("exp_avg_sq", s.exp_avg_sq());
        put("max_exp_avg_sq", s.max_exp_avg_sq());
      };
      if (kind_ == "adam")
        fields(static_cast<torch::optim::AdamParamState&>(*it->second));
      else
        fields(static_cast<torch::optim::AdamWParamState&>(*it->second));
    } else if (kind_ == "rmsprop") {
      auto& s = static_cast<torch::optim::RMSpropParamState&>(*it->second);
      put("step", step_tensor(s.step()));
      put("square_avg", s.square_avg());
      put("momentum_buffer", s.momentum_buffer());
      put("grad_avg", s.grad_avg());
    } else {
      auto& s = static_cast<torch::optim::AdagradParamState&>(*it->second);
      put("step", step_tensor(s.step()));
      put("sum", s.sum());
    }
  }
  return out;
}

struct Optimizer::StagedState {
  std::map<std::string, double> options;
  std::vector<std::pair<compat::OptimStateKey, std::unique_ptr<torch::optim::OptimizerParamState>>>
      states;
};

void Optimizer::check_saved_options(const std::map<std::string, double>& options) const {
  for (const auto& [k, v] : options)
    if (!options_.count(k))
      fail(Errc::invalid_argument, "optimizer " + kind_ + ": saved option '" + k + "' is unknown");
  // save_state writes every option: one missing means the file was edited or cut.
  for (const auto& [k, v] : options_)
    if (!options.count(k))
      fail(Errc::invalid_argument, "optimizer " + kind_ + ": the saved options lack '" + k + "'");
  for (const auto& [k, v] : options) check_option(k, v, options);
}

std::shared_ptr<Optimizer::StagedState> Optimizer::stage_state(
    const std::map<std::string, double>& options,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
  if (!impl_) fail(Errc::state, "the optimizer is not bound to parameters yet: prepare it first");
  check_saved_options(options);
  auto staged = std::make_shared<StagedState>();
  staged->options = options;

  std::map<size_t, std::map<std::string, at::Tensor>> by_param;
  for (const auto& [name, t] : tensors) {
    const auto dot = name.find('.');
    long long index = -1;
    if (dot == std::string::npos || !parse_int(name.substr(0, dot), &index) || index < 0 ||
        static_cast<size_t>(index) >= params_.size())
      fail(Errc::shape, "optimizer state '" + name + "' does not belong to one of the " +
                            std::to_string(params_.size()) + " parameters");
    by_param[static_cast<size_t>(index)][name.substr(dot + 1)] = t;
  }
  const std::map<std::string, std::vector<std::string>> fields_of = {
      {"sgd", {"momentum_buffer"}},
      {"adam", {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"adamw", {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"rmsprop", {"step", "square_avg", "momentum_buffer", "grad_avg"}},
      {"adagrad", {"step", "sum"}}};
  const auto& known = fields_of.at(kind_);
  for (auto& [i, fields] : by_param) {
    const at::Tensor& p = params_[i];
    const bool owned = owned_.empty() || owned_[i];
    for (const auto& [f, t] : fields)
      if (std::find(known.begin(), known.end(), f) == known.end())
        fail(Errc::shape, "optimizer state " + std::to_string(i) + "." + f + " is not a field of " +
                              kind_ + "'s state");
    auto tensor = [&](const char* f) -> at::Tensor {
      auto it = fields.find(f);
      if (it == fields.end()) return {};
      if (it->second.sizes() != p.sizes())
        fail(Errc::shape, "optimizer state " + std::to_string(i) + "." + f +
                              " does not have its parameter's shape");
      if (!at::isFloatingType(it->second.scalar_type()))
        fail(Errc::dtype,
             "optimizer state " + std::to_string(i) + "." + f + " is not a floating-point tensor");
      return it->second.to(p.device(), p.scalar_type()).clone();
    };
    auto step = [&]() -> int64_t {
      auto it = fields.find("step");
      if (it == fields.end()) return 0;
      const at::Tensor& s = it->second;
      if (s.numel() != 1 || at::isFloatingType(s.scalar_type()) || s.item<int64_t>() < 0)
        fail(Errc::shape,
             "optimizer state " + std::to_string(i) + ".step is not one non-negative integer");
      return s.item<int64_t>();
    };
    std::unique_ptr<torch::optim::OptimizerParamState> s;
    if (kind_ == "sgd") {
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(tensor("momentum_buffer"));
      s = std::move(st);
    } else if (kind_ == "adam") {
      auto st = std::make_unique<torch::optim::AdamParamState>();
      st->step(step()).exp_avg(tensor("exp_avg")).exp_avg_sq(tensor("exp_avg_sq"));
      st->max_exp_avg_sq(tensor("max_exp_avg_sq"));
      s = std::move(st);
    } else if (kind_ == "adamw") {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(step()).exp_avg(tensor("exp_avg")).exp_avg_sq(tensor("exp_avg_sq"));
      st->max_exp_avg_sq(tensor("max_exp_avg_sq"));
      s = std::move(st);
    } else if (kind_ == "rmsprop") {
      auto st = std::make_unique<torch::optim::RMSpropParamState>();
      st->step(step()).square_avg(tensor("square_avg"));
      st->momentum_buffer(tensor("momentum_buffer")).grad_avg(tensor("grad_avg"));
      s = std::move(st);
    } else {
      auto st = std::make_unique<torch::optim::AdagradParamState>();
      st->step(step()).sum(tensor("sum"));
      s = std::move(st);
    }
    // Checked everywhere; kept only by the rank that steps the parameter (ZeRO stage 1).
    if (owned) staged->states.emplace_back(key_of(p), std::move(s));
  }
  return staged;
}

void Optimizer::apply_state(StagedState& staged) {
  options_ = std::move(staged.options);
  apply_options();
  auto& state = impl_->state();
  state.clear();
  for (auto& [key, s] : staged.states) state[key] = std::move(s);
  staged.states.clear();
}

}  // namespace accel::optim
