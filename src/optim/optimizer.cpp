#include "optim/optimizer.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

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

// The parameters of each group with that group's options, in group order.
struct GroupParams {
  std::vector<at::Tensor> params;
  const Options* options;
};

// LibTorch's optimizer with one param group per group (empty ones too, so that param_groups()[g]
// is group g). `defaults` are the optimizer's own: Adagrad fills every state from its
// initial_accumulator_value, as PyTorch's does.
template <class Impl, class Opts, void (*Configure)(Opts&, const Options&)>
std::unique_ptr<torch::optim::Optimizer> build_as(const std::vector<GroupParams>& groups,
                                                  const Options& defaults) {
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  for (const GroupParams& g : groups) {
    auto opts = std::make_unique<Opts>(g.options->at("lr"));
    Configure(*opts, *g.options);
    param_groups.emplace_back(g.params, std::move(opts));
  }
  Opts opts(defaults.at("lr"));
  Configure(opts, defaults);
  return std::make_unique<Impl>(std::move(param_groups), opts);
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
  std::unique_ptr<torch::optim::Optimizer> (*build)(const std::vector<GroupParams>& groups,
                                                    const Options& defaults);
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

std::string where_of(const std::string& kind, size_t group) {
  return "optimizer " + kind + (group ? " group " + std::to_string(group) : std::string());
}

// A saved option of a later group, "group<g>.<key>" with g >= 1: g and key (none otherwise).
std::optional<std::pair<size_t, std::string>> split_group_key(const std::string& k) {
  const auto dot = k.find('.');
  long long g = 0;
  if (k.rfind("group", 0) != 0 || dot == std::string::npos || dot == 5 ||
      k.find_first_not_of("0123456789", 5) != dot || !parse_int(k.substr(5, dot - 5), &g) || g < 1)
    return std::nullopt;
  return std::make_pair(static_cast<size_t>(g), k.substr(dot + 1));
}

}  // namespace

Optimizer::Optimizer(const std::string& kind)
    : kind_(kind), defaults_(optimizer_row(kind).defaults) {
  groups_.push_back(Group{{}, defaults_, std::nullopt});
}

Optimizer::~Optimizer() = default;

const Optimizer::Group& Optimizer::checked_group(size_t group) const {
  if (group >= groups_.size())
    fail(Errc::invalid_argument, "optimizer " + kind_ + " has " + std::to_string(groups_.size()) +
                                     " parameter group(s); there is no group " +
                                     std::to_string(group));
  return groups_[group];
}

double Optimizer::option(const std::string& key) const {
  return group_option(0, key);
}

double Optimizer::group_option(size_t group, const std::string& key) const {
  const auto& options = checked_group(group).options;
  auto it = options.find(key);
  if (it == options.end()) fail(Errc::invalid_argument, kind_ + " has no option '" + key + "'");
  return it->second;
}

void Optimizer::check_option(const std::string& key, double v,
                             const std::map<std::string, double>& all,
                             const std::string& where_) const {
  const std::string where = where_ + ": '" + key + "'";
  if (!std::isfinite(v))
    fail(Errc::invalid_argument, where + " must be a finite number, not " + format_real(v));
  if (is_flag(key) && v != 0 && v != 1)
    fail(Errc::invalid_argument, where + " must be true or false");
  if (v < 0) fail(Errc::invalid_argument, where + " must not be negative");
  if ((key == "beta1" || key == "beta2" || key == "alpha") && v >= 1)
    fail(Errc::invalid_argument, where + " must be below 1");
  if (kind_ == "sgd" && key == "nesterov" && v != 0 &&
      (all.at("momentum") <= 0 || all.at("dampening") != 0))
    fail(Errc::invalid_argument, where_.substr(std::string("optimizer ").size()) +
                                     ": nesterov needs momentum > 0 and dampening 0");
}

double Optimizer::parse_option(const std::string& key, const std::string& value) const {
  if (!defaults_.count(key)) {
    std::string known;
    for (const auto& [k, v] : defaults_) known += (known.empty() ? "" : ", ") + k;
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
  return v;
}

void Optimizer::set(const std::string& key, const std::string& value) {
  const double v = parse_option(key, value);
  check_option(key, v, groups_[0].options, where_of(kind_, 0));
  check_option(key, v, defaults_, where_of(kind_, 0));
  groups_[0].options[key] = v;
  defaults_[key] = v;
  apply_options();
}

void Optimizer::set_group(size_t group, const std::string& key, const std::string& value) {
  checked_group(group);
  const double v = parse_option(key, value);
  check_option(key, v, groups_[group].options, where_of(kind_, group));
  groups_[group].options[key] = v;
  apply_options();
}

size_t Optimizer::add_group(const std::vector<std::string>& names) {
  const std::string where = "optimizer " + kind_;
  if (foreign_)
    fail(Errc::state, where + ": the program's own optimizer has its parameter groups already");
  if (stepped_) fail(Errc::state, where + ": parameter groups are made before the first step");
  if (groups_[0].initial_lr)
    fail(Errc::state, where +
                          ": parameter groups are made before a scheduler over the optimizer "
                          "(it takes each group's base learning rate when it is made)");
  if (names.empty())
    fail(Errc::invalid_argument, where + ": a parameter group needs at least one parameter");
  if (!names_) fail(Errc::internal, where + ": the names of its parameters are not known");
  std::set<std::string> known, seen;
  for (const auto& [name, trainable] : names_()) known.insert(name);
  for (const auto& n : names) {
    if (!known.count(n))
      fail(Errc::invalid_argument, where + ": the model has no parameter '" + n +
                                       "' (accel_model_tensor_name lists the names)");
    if (!seen.insert(n).second)
      fail(Errc::invalid_argument, where + ": parameter '" + n + "' is named twice in the group");
    for (size_t g = 1; g < groups_.size(); ++g)
      if (std::find(groups_[g].names.begin(), groups_[g].names.end(), n) != groups_[g].names.end())
        fail(Errc::invalid_argument, where + ": parameter '" + n + "' is in group " +
                                         std::to_string(g) + " already (one group a parameter)");
  }
  groups_.push_back(Group{names, defaults_, std::nullopt});
  if (impl_) {  // bound by a zero_grad before any step: rebuilt over the new groups
    assign_groups();
    build();
  }
  return groups_.size() - 1;
}

void Optimizer::bind(std::vector<at::Tensor> params) {
  if (params.empty()) fail(Errc::invalid_argument, "the optimizer has no parameters to optimise");
  if (foreign_) return bind_foreign(std::move(params));
  params_ = std::move(params);
  owned_.assign(params_.size(), true);
  assign_groups();
  build();
}

// Each bound parameter's group, from the group's names and the model's order of its parameters.
void Optimizer::assign_groups() {
  group_of_.assign(params_.size(), 0);
  if (groups_.size() == 1) return;
  std::map<std::string, size_t> group_by_name;
  for (size_t g = 1; g < groups_.size(); ++g)
    for (const auto& n : groups_[g].names) group_by_name[n] = g;
  size_t i = 0;
  for (const auto& [name, trainable] : names_()) {
    if (!trainable) continue;
    if (i < params_.size())
      if (auto it = group_by_name.find(name); it != group_by_name.end()) group_of_[i] = it->second;
    ++i;
  }
  if (i != params_.size())
    fail(Errc::internal, "optimizer " + kind_ + ": bound to " + std::to_string(params_.size()) +
                             " parameters, but the model names " + std::to_string(i));
}

void Optimizer::shard(const std::vector<bool>& owned) {
  if (foreign_) fail(Errc::unsupported, "ZeRO cannot shard a program's own torch::optim optimizer");
  if (owned.size() != params_.size())
    fail(Errc::internal, "optimizer shard: one ownership flag per parameter expected");
  owned_ = owned;
  build();
}

void Optimizer::build() {
  std::vector<GroupParams> groups;
  for (const Group& g : groups_) groups.push_back({{}, &g.options});
  for (size_t i = 0; i < params_.size(); ++i)
    if (owned_[i]) groups[group_of_[i]].params.push_back(params_[i]);
  impl_ = optimizer_row(kind_).build(groups, defaults_);
}

// Writes the options into the live param groups (LibTorch reads them at every step).
void Optimizer::apply_options() {
  if (!impl_) return;
  if (foreign_) return apply_foreign_lrs();
  const OptimizerRow& row = optimizer_row(kind_);
  for (size_t g = 0; g < groups_.size(); ++g)
    row.apply(impl_->param_groups().at(g).options(), groups_[g].options);
}

torch::optim::Optimizer& Optimizer::torch_optimizer() {
  if (!impl_) fail(Errc::state, "the optimizer is not bound to parameters yet");
  return *impl_;
}

void Optimizer::step() {
  auto& impl = torch_optimizer();
  stepped_ = true;
  impl.step();
}

void Optimizer::zero_grad(const std::function<bool(const at::Tensor& param)>& in_place) {
  for (auto& p : params_)
    if (p.grad().defined() && !(in_place && in_place(p))) p.mutable_grad() = at::Tensor();
}

void Optimizer::set_lr(double lr) {
  check_option("lr", lr, defaults_, where_of(kind_, 0));
  groups_[0].options["lr"] = lr;
  defaults_["lr"] = lr;
  apply_options();
}

void Optimizer::set_group_lr(size_t group, double lr) {
  checked_group(group);
  check_option("lr", lr, groups_[group].options, where_of(kind_, group));
  groups_[group].options["lr"] = lr;
  apply_options();
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  checked_group(group);
  check_option("initial_lr", lr, groups_[group].options, where_of(kind_, group));
  groups_[group].initial_lr = lr;
}

bool Optimizer::has_momentum() const {
  return !foreign_ && (defaults_.count("momentum") || defaults_.count("beta1"));
}

void Optimizer::set_momentum(double m) {
  const char* key = defaults_.count("beta1") ? "beta1" : "momentum";
  for (Group& g : groups_) g.options[key] = m;
  apply_options();
}

std::map<std::string, double> Optimizer::options() const {
  std::map<std::string, double> out = groups_[0].options;
  for (size_t g = 1; g < groups_.size(); ++g) {
    const std::string p = "group" + std::to_string(g) + ".";
    for (const auto& [k, v] : groups_[g].options) out[p + k] = v;
    out[p + "params"] = static_cast<double>(groups_[g].names.size());
    if (groups_[g].initial_lr) out[p + "initial_lr"] = *groups_[g].initial_lr;
  }
  return out;
}

namespace {
compat::OptimStateKey key_of(const at::Tensor& p) {
  return compat::optim_state_key(p);
}
}  // namespace

namespace {

// The row whose state functions checkpoint an optimizer: a program's own of a class libaccel
// does not know has none.
const OptimizerRow& checkpoint_row(const std::string& kind, bool foreign) {
  for (const OptimizerRow& row : optimizers())
    if (kind == row.kind) return row;
  if (foreign)
    fail(Errc::unsupported,
         "a program's own optimizer of a class other than LibTorch's SGD, Adam, AdamW, RMSprop "
         "and Adagrad cannot be checkpointed by libaccel: its state's fields are its own");
  return optimizer_row(kind);
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!impl_ || impl_->state().empty()) return out;
  const OptimizerRow& row = checkpoint_row(kind_, foreign_);
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

// Saved options by group: each group's options and its base rate for schedulers.
struct Optimizer::SavedGroups {
  std::vector<std::map<std::string, double>> options;
  std::vector<std::optional<double>> initial_lrs;
};

struct Optimizer::StagedState {
  SavedGroups groups;
  std::vector<std::pair<compat::OptimStateKey, std::unique_ptr<torch::optim::OptimizerParamState>>>
      states;
};

Optimizer::SavedGroups Optimizer::read_saved(const std::map<std::string, double>& saved) const {
  const size_t n = groups_.size();
  SavedGroups out;
  out.options.resize(n);
  out.initial_lrs.resize(n);
  std::vector<std::optional<double>> sizes(n);
  size_t saved_groups = 1;
  for (const auto& [k, v] : saved) {
    const auto split = split_group_key(k);
    if (!split) {
      out.options[0][k] = v;
      continue;
    }
    const auto& [g, key] = *split;
    saved_groups = std::max(saved_groups, g + 1);
    if (g >= n) continue;  // reported below
    if (key == "params")
      sizes[g] = v;
    else if (key == "initial_lr")
      out.initial_lrs[g] = v;
    else
      out.options[g][key] = v;
  }
  for (size_t g = 1; g < n && saved_groups == n; ++g)
    if (out.options[g].empty() && !sizes[g]) saved_groups = g;
  if (saved_groups != n)
    fail(Errc::state, "optimizer " + kind_ + ": the checkpoint has " +
                          std::to_string(saved_groups) + " parameter group(s), this optimizer " +
                          std::to_string(n) + " (make the same groups before loading)");
  for (size_t g = 0; g < n; ++g) {
    const std::string p = g ? "group" + std::to_string(g) + "." : "";
    const std::string where = "optimizer " + kind_;
    for (const auto& [k, v] : out.options[g])
      if (!defaults_.count(k))
        fail(Errc::invalid_argument, where + ": saved option '" + p + k + "' is unknown");
    // save_state writes every option: one missing means the file was edited or cut.
    for (const auto& [k, v] : defaults_)
      if (!out.options[g].count(k))
        fail(Errc::invalid_argument, where + ": the saved options lack '" + p + k + "'");
    for (const auto& [k, v] : out.options[g])
      check_option(k, v, out.options[g], where_of(kind_, g));
    if (out.initial_lrs[g])
      check_option("initial_lr", *out.initial_lrs[g], out.options[g], where_of(kind_, g));
    if (g == 0) continue;
    if (!sizes[g])
      fail(Errc::invalid_argument, where + ": the saved options lack '" + p + "params'");
    if (*sizes[g] != static_cast<double>(groups_[g].names.size()))
      fail(Errc::state, where_of(kind_, g) + " has " + format_real(*sizes[g]) +
                            " parameter(s) in the checkpoint and " +
                            std::to_string(groups_[g].names.size()) +
                            " here (make the same groups before loading)");
  }
  return out;
}

void Optimizer::check_saved_options(const std::map<std::string, double>& options) const {
  read_saved(options);
}
std::shared_ptr<Optimizer::StagedState> Optimizer::stage_state(
    const std::map<std::string, double>& options,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
  if (!impl_) fail(Errc::state, "the optimizer is not bound to parameters yet: prepare it first");
  auto staged = std::make_shared<StagedState>();
  staged->groups = read_saved(options);

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
  const OptimizerRow& row = checkpoint_row(kind_, foreign_);
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
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].options = std::move(staged.groups.options[g]);
    if (g > 0 && staged.groups.initial_lrs[g]) groups_[g].initial_lr = staged.groups.initial_lrs[g];
  }
  apply_options();
  auto& state = impl_->state();
  state.clear();
  for (auto& [key, s] : staged.states) state[key] = std::move(s);
  staged.states.clear();
}

}  // namespace accel::optim
