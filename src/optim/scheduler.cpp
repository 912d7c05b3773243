#include "optim/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::optim {

namespace {

const double kPi = 3.14159265358979323846;

using Options = std::map<std::string, double>;

double cos_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
}

double linear_anneal(double start, double end, double pct) {
  return (end - start) * pct + start;
}

double warm(double step, double w) {
  return step / std::max(1.0, w);
}

// Each kind's learning rate after `step` steps from the initial rate `base`, with its options `o`.
double constant_lr(const Options&, double, double base) {
  return base;
}

double constant_with_warmup_lr(const Options& o, double step, double base) {
  const double w = o.at("warmup_steps");
  return base * (step < w ? warm(step, w) : 1.0);
}

double linear_lr(const Options& o, double step, double base) {
  const double w = o.at("warmup_steps"), total = o.at("total_steps");
  if (step < w) return base * warm(step, w);
  return base * std::max(0.0, (total - step) / std::max(1.0, total - w));
}

double cosine_lr(const Options& o, double step, double base) {
  const double w = o.at("warmup_steps"), total = o.at("total_steps"), cycles = o.at("num_cycles");
  if (step < w) return base * warm(step, w);
  const double progress = (step - w) / std::max(1.0, total - w);
  return base * std::max(0.0, 0.5 * (1.0 + std::cos(kPi * cycles * 2.0 * progress)));
}

double cosine_with_restarts_lr(const Options& o, double step, double base) {
  const double w = o.at("warmup_steps"), total = o.at("total_steps"), cycles = o.at("num_cycles");
  if (step < w) return base * warm(step, w);
  const double progress = (step - w) / std::max(1.0, total - w);
  if (progress >= 1.0) return 0.0;
  return base * std::max(0.0, 0.5 * (1.0 + std::cos(kPi * std::fmod(cycles * progress, 1.0))));
}

double polynomial_lr(const Options& o, double step, double base) {
  const double w = o.at("warmup_steps"), total = o.at("total_steps");
  const double lr_end = o.at("lr_end"), power = o.at("power");
  if (base < lr_end)
    fail(Errc::invalid_argument, "scheduler polynomial: lr_end must not exceed the initial lr");
  if (step < w) return base * warm(step, w);
  if (step > total) return lr_end;
  const double remaining = 1.0 - (step - w) / (total - w);
  return (base - lr_end) * std::pow(remaining, power) + lr_end;
}

// transformers' polynomial schedule is LambdaLR with a factor made from the optimizer's lr: for a
// group whose base rate is another one, that factor times the group's base.
double polynomial_group_lr(const Options& o, double step, double base, double first) {
  const double lr = polynomial_lr(o, step, first);
  if (base == first) return lr;
  return first > 0 ? base * (lr / first) : 0.0;
}

double step_lr(const Options& o, double step, double base) {
  return base * std::pow(o.at("gamma"), std::floor(step / o.at("step_size")));
}

double exponential_lr(const Options& o, double step, double base) {
  return base * std::pow(o.at("gamma"), step);
}

// one_cycle: warm up from max_lr/div_factor to max_lr, then anneal to initial/final_div_factor.
double one_cycle_lr(const Options& o, double step, double) {
  const double max_lr = o.at("max_lr"), total = o.at("total_steps");
  const double initial = max_lr / o.at("div_factor"), min_lr = initial / o.at("final_div_factor");
  const double up_end = o.at("pct_start") * total - 1, down_end = total - 1;
  auto anneal = o.at("anneal_strategy") == 0 ? cos_anneal : linear_anneal;
  if (step <= up_end) return anneal(initial, max_lr, step / up_end);
  return anneal(max_lr, min_lr, (step - up_end) / (down_end - up_end));
}

std::optional<double> one_cycle_momentum(const Options& o, double step) {
  if (o.at("cycle_momentum") == 0) return std::nullopt;
  const double total = o.at("total_steps");
  const double up_end = o.at("pct_start") * total - 1, down_end = total - 1;
  const double lo = o.at("base_momentum"), hi = o.at("max_momentum");
  auto anneal = o.at("anneal_strategy") == 0 ? cos_anneal : linear_anneal;
  if (step <= up_end) return anneal(hi, lo, step / up_end);
  return anneal(lo, hi, (step - up_end) / (down_end - up_end));
}

// Checks of a kind beyond its required options being set.
void check_step(const Options& o) {
  if (o.at("step_size") < 1)
    fail(Errc::invalid_argument, "scheduler step: step_size must be at least 1");
}

void check_one_cycle(const Options& o) {
  if (o.at("pct_start") <= 0 || o.at("pct_start") >= 1)
    fail(Errc::invalid_argument, "scheduler one_cycle: pct_start must be in (0, 1)");
  if (o.at("total_steps") < 2)
    fail(Errc::invalid_argument, "scheduler one_cycle: total_steps must be at least 2");
}

// One schedule kind: its options with their defaults (-1: required), its rate, the momentum it
// cycles (none: nullptr), its own checks (none: nullptr), whether it stops at total_steps, and
// the rate of a group whose base is not group 0's `first` (nullptr: lr_at with the group's base).
struct ScheduleRow {
  const char* kind;
  Options defaults;
  double (*lr_at)(const Options& o, double step, double base);
  std::optional<double> (*momentum_at)(const Options& o, double step) = nullptr;
  void (*check)(const Options& o) = nullptr;
  bool ends_at_total_steps = false;
  double (*group_lr)(const Options& o, double step, double base, double first) = nullptr;
};

// The schedules: one row a kind. A new kind: its functions above and a row here.
const std::vector<ScheduleRow>& schedules() {
  static const std::vector<ScheduleRow> rows = {
      {"constant", {}, constant_lr},
      {"constant_with_warmup", {{"warmup_steps", 0}}, constant_with_warmup_lr},
      {"linear", {{"warmup_steps", 0}, {"total_steps", -1}}, linear_lr},
      {"cosine", {{"warmup_steps", 0}, {"total_steps", -1}, {"num_cycles", 0.5}}, cosine_lr},
      {"cosine_with_restarts",
       {{"warmup_steps", 0}, {"total_steps", -1}, {"num_cycles", 1}},
       cosine_with_restarts_lr},
      {"polynomial",
       {{"warmup_steps", 0}, {"total_steps", -1}, {"lr_end", 1e-7}, {"power", 1.0}},
       polynomial_lr,
       nullptr,
       nullptr,
       false,
       polynomial_group_lr},
      {"step", {{"step_size", -1}, {"gamma", 0.1}}, step_lr, nullptr, check_step},
      {"exponential", {{"gamma", -1}}, exponential_lr},
      {"one_cycle",
       {{"max_lr", -1},
        {"total_steps", -1},
        {"pct_start", 0.3},
        {"anneal_strategy", 0},
        {"div_factor", 25},
        {"final_div_factor", 1e4},
        {"base_momentum", 0.85},
        {"max_momentum", 0.95},
        {"cycle_momentum", 1}},
       one_cycle_lr,
       one_cycle_momentum,
       check_one_cycle,
       true},
  };
  return rows;
}

const ScheduleRow* find_schedule(const std::string& kind) {
  for (const ScheduleRow& row : schedules())
    if (kind == row.kind) return &row;
  return nullptr;
}

}  // namespace

Schedule::Schedule(const std::string& kind) : kind_(kind) {
  const ScheduleRow* row = find_schedule(kind);
  if (!row) {
    std::set<std::string> names;  // listed in alphabetical order
    for (const ScheduleRow& r : schedules()) names.insert(r.kind);
    std::string known;
    for (const auto& k : names) known += (known.empty() ? "" : ", ") + k;
    fail(Errc::invalid_argument, "unknown scheduler '" + kind + "'; known: " + known);
  }
  options_ = row->defaults;
}

void Schedule::set(const std::string& key, const std::string& value) {
  auto it = options_.find(key);
  if (it == options_.end()) {
    std::string known;
    for (const auto& [k, v] : options_) known += (known.empty() ? "" : ", ") + k;
    fail(Errc::invalid_argument, "scheduler " + kind_ + ": unknown option '" + key + "'" +
                                     (known.empty() ? " (it takes none)" : "; known: " + known));
  }
  double v = 0;
  if (key == "anneal_strategy") {
    if (value != "cos" && value != "linear")
      fail(Errc::invalid_argument, "scheduler one_cycle: anneal_strategy is 'cos' or 'linear'");
    v = value == "cos" ? 0 : 1;
  } else if (key == "cycle_momentum") {
    if (value != "true" && value != "false" && value != "1" && value != "0")
      fail(Errc::invalid_argument, "scheduler one_cycle: cycle_momentum is true or false");
    v = (value == "true" || value == "1") ? 1 : 0;
  } else {
    if (!parse_real(value, &v))
      fail(Errc::invalid_argument,
           "scheduler " + kind_ + ": '" + key + "=" + value + "' is not a number");
    if (v < 0) fail(Errc::invalid_argument, "scheduler " + kind_ + ": '" + key + "' must be >= 0");
  }
  it->second = v;
}

double Schedule::get(const std::string& key) const {
  return options_.at(key);
}

void Schedule::validate() const {
  for (const char* required : {"total_steps", "step_size", "gamma", "max_lr"})
    if (options_.count(required) && options_.at(required) < 0)
      fail(Errc::invalid_argument,
           "scheduler " + kind_ + ": option '" + std::string(required) + "' must be set");
  if (auto check = find_schedule(kind_)->check) check(options_);
}

int64_t Schedule::max_steps() const {
  return find_schedule(kind_)->ends_at_total_steps ? static_cast<int64_t>(get("total_steps")) : -1;
}

double Schedule::lr_at(int64_t step, double base) const {
  return find_schedule(kind_)->lr_at(options_, static_cast<double>(step), base);
}

double Schedule::group_lr(int64_t step, double base_lr, double first_base_lr) const {
  const ScheduleRow* row = find_schedule(kind_);
  if (!row->group_lr) return lr_at(step, base_lr);
  return row->group_lr(options_, static_cast<double>(step), base_lr, first_base_lr);
}

std::optional<double> Schedule::momentum_at(int64_t step) const {
  auto momentum = find_schedule(kind_)->momentum_at;
  if (!momentum) return std::nullopt;
  return momentum(options_, static_cast<double>(step));
}

}  // namespace accel::optim
