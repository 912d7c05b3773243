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

using Options = std::map<std::string, double>;
using Put = std::function<void(const char* field, const at::Tensor& t)>;
using Field = std::function<at::Tensor(const char* field)>;
using Step = std::function<int64_t()>;

at::Tensor step_tensor(int64_t step) {
  return at::full({}, step, at::kLong);
}

// Each kind's options written into LibTorch's options of that kind (at build, and into the live
// param group whenever one changes: LibTorch reads them at every step).
void configure_sgd(torch::optim::SGDOptions& g, const Options& o) {
  g.lr(o.at("lr")).momentum(o.at("momentum")).dampening(o.at("dampening"));
  g.weight_decay(o.at("weight_decay")).nesterov(o.at("nesterov") != 0);
}

template <class AdamOptions>  // Adam's and AdamW's options have the same fields
void configure_adam(AdamOptions& g, const Options& o) {
  g.lr(o.at("lr")).betas({o.at("beta1"), o.at("beta2")}).eps(o.at("eps"));
  g.weight_decay(o.at("weight_decay")).amsgrad(o.at("amsgrad") != 0);
}

void configure_rmsprop(torch::optim::RMSpropOptions& g, const Options& o) {
  g.lr(o.at("lr")).alpha(o.at("alpha")).eps(o.at("eps")).weight_decay(o.at("weight_decay"));
  g.momentum(o.at("momentum")).centered(o.at("centered") != 0);
}

void configure_adagrad(torch::optim::AdagradOptions& g, const Options& o) {
  g.lr(o.at("lr")).lr_decay(o.at("lr_decay")).weight_decay(o.at("weight_decay"));
  g.initial_accumulator_value(o.at("initial_accumulator_value")).eps(o.at("eps"));
}

template <class Impl, class Opts, void (*Configure)(Opts&, const Options&)>
std::unique_ptr<torch::optim::Optimizer> build_as(const std::vector<at::Tensor>& params,
                                                  const Options& o) {
  Opts opts(o.at("lr"));
  Configure(opts, o);
  return std::make_unique<Impl>(params, opts);
}

template <class Opts, void (*Configure)(Opts&, const Options&)>
void apply_as(torch::optim::OptimizerOptions& group, const Options& o) {
  Configure(static_cast<Opts&>(group), o);
}

// Each kind's per-parameter state as named tensors (save), and back (load: `tensor` gives a
// field's tensor, undefined when absent; `step` the step, 0 when absent).
void save_sgd(torch::optim::OptimizerParamState& st, const Put& put) {
  put("momentum_buffer", static_cast<torch::optim::SGDParamState&>(st).momentum_buffer());
}

template <class State>  // Adam's and AdamW's states have the same fields
void save_adam(torch::optim::OptimizerParamState& st, const Put& put) {
  auto& s = static_cast<State&>(st);
  put("step", step_tensor(s.step()));
  put("exp_avg", s.exp_avg());
  put("exp_avg_sq", s.exp_avg_sq());
  put("max_exp_avg_sq", s.max_exp_avg_sq());
}

void save_rmsprop(torch::optim::OptimizerParamState& st, const Put& put) {
  auto& s = static_cast<torch::optim::RMSpropParamState&>(st);
  put("step", step_tensor(s.step()));
  put("square_avg", s.square_avg());
  put("momentum_buffer", s.momentum_buffer());
  put("grad_avg", s.grad_avg());
}

void save_adagrad(torch::optim::OptimizerParamState& st, const Put& put) {
  auto& s = static_cast<torch::optim::AdagradParamState&>(st);
  put("step", step_tensor(s.step()));
  put("sum", s.sum());
}

std::unique_ptr<torch::optim::OptimizerParamState> load_sgd(const Field& tensor, const Step&) {
  auto st = std::make_unique<torch::optim::SGDParamState>();
  st->momentum_buffer(tensor("momentum_buffer"));
  return st;
}

template <class State>
std::unique_ptr<torch::optim::OptimizerParamState> load_adam(const Field& tensor,
                                                             const Step& step) {
  auto st = std::make_unique<State>();
  st->step(step()).exp_avg(tensor("exp_avg")).exp_avg_sq(tensor("exp_avg_sq"));
  st->max_exp_avg_sq(tensor("max_exp_avg_sq"));
  return st;
}

std::unique_ptr<torch::optim::OptimizerParamState> load_rmsprop(const Field& tensor,
                                                                const Step& step) {
  auto st = std::make_unique<torch::optim::RMSpropParamState>();
  st->step(step()).square_avg(tensor("square_avg"));
  st->momentum_buffer(tensor("momentum_buffer")).grad_avg(tensor("grad_avg"));
  return st;
}

std::unique_ptr<torch::optim::OptimizerParamState> load_adagrad(const Field& tensor,
                                                                const Step& step) {
  auto st = std::make_unique<torch::optim::AdagradParamState>();
  st->step(step()).sum(tensor("sum"));
  return st;
}

// One optimizer kind: its options with PyTorch's defaults (booleans stored as 0/1), the fields of
// its per-parameter state, and its LibTorch class's build, options, and state both ways.
struct OptimizerRow {
  const char* kind;
  Options defaults;
  std::vector<std::string> state_fields;
  std::unique_ptr<torch::optim::Optimizer> (*build)(const std::vector<at::Tensor>& params,
                                                    const Options& o);
  void (*apply)(torch::optim::OptimizerOptions& group, const Options& o);
  void (*save)(torch::optim::OptimizerParamState& st, const Put& put);
  std::unique_ptr<torch::optim::OptimizerParamState> (*load)(const Field& tensor, const Step& step);
};

// The optimizers, in the order the unknown-kind error lists them. A new kind: its functions above
// and a row here.
const std::vector<OptimizerRow>& optimizers() {
  namespace to = torch::optim;
  static const std::vector<OptimizerRow> rows = {
      {"sgd",
       {{"lr", 1e-3}, {"momentum", 0}, {"dampening", 0}, {"weight_decay", 0}, {"nesterov", 0}},
       {"momentum_buffer"},
       build_as<to::SGD, to::SGDOptions, configure_sgd>,
       apply_as<to::SGDOptions, configure_sgd>,
       save_sgd,
       load_sgd},
      {"adam",
       {{"lr", 1e-3},
        {"beta1", 0.9},
        {"beta2", 0.999},
        {"eps", 1e-8},
        {"weight_decay", 0},
        {"amsgrad", 0}},
       {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
       build_as<to::Adam, to::AdamOptions, configure_adam<to::AdamOptions>>,
       apply_as<to::AdamOptions, configure_adam<to::AdamOptions>>,
       save_adam<to::AdamParamState>,
       load_adam<to::AdamParamState>},
      {"adamw",
       {{"lr", 1e-3},
        {"beta1", 0.9},
        {"beta2", 0.999},
        {"eps", 1e-8},
        {"weight_decay", 1e-2},
        {"amsgrad", 0}},
       {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
       build_as<LeanAdamW, to::AdamWOptions, configure_adam<to::AdamWOptions>>,
       apply_as<to::AdamWOptions, configure_adam<to::AdamWOptions>>,
       save_adam<to::AdamWParamState>,
       load_adam<to::AdamWParamState>},
      {"rmsprop",
       {{"lr", 1e-2},
        {"alpha", 0.99},
        {"eps", 1e-8},
        {"weight_decay", 0},
        {"momentum", 0},
        {"centered", 0}},
       {"step", "square_avg", "momentum_buffer", "grad_avg"},
       build_as<to::RMSprop, to::RMSpropOptions, configure_rmsprop>,
       apply_as<to::RMSpropOptions, configure_rmsprop>,
       save_rmsprop,
       load_rmsprop},
      {"adagrad",
       {{"lr", 1e-2},
        {"lr_decay", 0},
        {"weight_decay", 0},
        {"initial_accumulator_value", 0},
        {"eps", 1e-10}},
       {"step", "sum"},
       build_as<to::Adagrad, to::AdagradOptions, configure_adagrad>,
       apply_as<to::AdagradOptions, configure_adagrad>,
       save_adagrad,
       load_adagrad},
  };
  return rows;
}

const OptimizerRow& optimizer_row(const std::string& kind) {
  std::string known;
  for (const OptimizerRow& row : optimizers()) {
    if (kind == row.kind) return row;
    known += (known.empty() ? "" : ", ") + std::string(row.kind);
  }
  fail(Errc::invalid_argument, "unknown optimizer '" + kind + "'; known: " + known);
}

bool is_flag(const std::string& key) {
  return key == "nesterov" || key == "amsgrad" || key == "centered";
}

}  // namespace

Optimizer::Optimizer(const std::string& kind)
    : kind_(kind), options_(optimizer_row(kind).defaults) {}

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
  impl_ = optimizer_row(kind_).build(params, options_);
}

// Writes the options into the live param group (LibTorch reads them at every step).
void Optimizer::apply_options() {
  if (!impl_) return;
  optimizer_row(kind_).apply(impl_->param_groups().at(0).options(), options_);
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
}  // namespace

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!impl_) return out;
  const OptimizerRow& row = optimizer_row(kind_);
  auto& state = impl_->state();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = state.find(key_of(params_[i]));
    if (it == state.end()) continue;
    const std::string p = std::to_string(i) + ".";
    row.save(*it->second, [&](const char* field, const at::Tensor& t) {
      if (t.defined()) out.emplace_back(p + field, t.detach().clone());
    });
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
  const OptimizerRow& row = optimizer_row(kind_);
  const auto& known = row.state_fields;
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
    std::unique_ptr<torch::optim::OptimizerParamState> s = row.load(tensor, step);
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
