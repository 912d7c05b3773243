#include "optim/scheduler.hpp"

#include <cmath>
#include <set>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::optim {

namespace {

const double kPi = 3.14159265358979323846;

const std::map<std::string, std::map<std::string, double>>& kinds() {
  static const std::map<std::string, std::map<std::string, double>> k = {
      {"constant", {}},
      {"constant_with_warmup", {{"warmup_steps", 0}}},
      {"linear", {{"warmup_steps", 0}, {"total_steps", -1}}},
      {"cosine", {{"warmup_steps", 0}, {"total_steps", -1}, {"num_cycles", 0.5}}},
      {"cosine_with_restarts", {{"warmup_steps", 0}, {"total_steps", -1}, {"num_cycles", 1}}},
      {"polynomial", {{"warmup_steps", 0}, {"total_steps", -1}, {"lr_end", 1e-7}, {"power", 1.0}}},
      {"step", {{"step_size", -1}, {"gamma", 0.1}}},
      {"exponential", {{"gamma", -1}}},
      {"one_cycle",
       {{"max_lr", -1},
        {"total_steps", -1},
        {"pct_start", 0.3},
        {"anneal_strategy", 0},
        {"div_factor", 25},
        {"final_div_factor", 1e4},
        {"base_momentum", 0.85},
        {"max_momentum", 0.95},
        {"cycle_momentum", 1}}},
  };
  return k;
}

double cos_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
}

double linear_anneal(double start, double end, double pct) {
  return (end - start) * pct + start;
}

}  // namespace

Schedule::Schedule(const std::string& kind) : kind_(kind) {
  auto it = kinds().find(kind);
  if (it == kinds().end()) {
    std::string known;
    for (const auto& [k, v] : kinds()) known += (known.empty() ? "" : ", ") + k;
    fail(Errc::invalid_argument, "unknown scheduler '" + kind + "'; known: " + known);
  }
  options_ = it->second;
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
  if (kind_ == "step" && get("step_size") < 1)
    fail(Errc::invalid_argument, "scheduler step: step_size must be at least 1");
  if (kind_ == "one_cycle" && (get("pct_start") <= 0 || get("pct_start") >= 1))
    fail(Errc::invalid_argument, "scheduler one_cycle: pct_start must be in (0, 1)");
  if (kind_ == "one_cycle" && get("total_steps") < 2)
    fail(Errc::invalid_argument, "scheduler one_cycle: total_steps must be at least 2");
}

int64_t Schedule::max_steps() const {
  return kind_ == "one_cycle" ? static_cast<int64_t>(get("total_steps")) : -1;
}

double Schedule::lr_at(int64_t step_i, double base) const {
  const double step = static_cast<double>(step_i);
  auto warm = [&](double w) { return step / std::max(1.0, w); };
  if (kind_ == "constant") return base;
  if (kind_ == "constant_with_warmup") {
    const double w = get("warmup_steps");
    return base * (step < w ? warm(w) : 1.0);
  }
  if (kind_ == "linear") {
    const double w = get("warmup_steps"), total = get("total_steps");
    if (step < w) return base * warm(w);
    return base * std::max(0.0, (total - step) / std::max(1.0, total - w));
  }
  if (kind_ == "cosine" || kind_ == "cosine_with_restarts") {
    const double w = get("warmup_steps"), total = get("total_steps"), cycles = get("num_cycles");
    if (step < w) return base * warm(w);
    const double progress = (step - w) / std::max(1.0, total - w);
    if (kind_ == "cosine")
      return base * std::max(0.0, 0.5 * (1.0 + std::cos(kPi * cycles * 2.0 * progress)));
    if (progress >= 1.0) return 0.0;
    return base * std::max(0.0, 0.5 * (1.0 + std::cos(kPi * std::fmod(cycles * progress, 1.0))));
  }
  if (kind_ == "polynomial") {
    const double w = get("warmup_steps"), total = get("total_steps");
    const double lr_end = get("lr_end"), power = get("power");
    if (base < lr_end)
      fail(Errc::invalid_argument, "scheduler polynomial: lr_end must not exceed the initial lr");
    if (step < w) return base * warm(w);
    if (step > total) return lr_end;
    const double remaining = 1.0 - (step - w) / (total - w);
    return (base - lr_end) * std::pow(remaining, power) + lr_end;
  }
  if (kind_ == "step") return base * std::pow(get("gamma"), std::floor(step / get("step_size")));
  if (kind_ == "exponential") return base * std::pow(get("gamma"), step);
  // one_cycle: warm up from max_lr/div_factor to max_lr, then anneal to initial/final_div_factor.
  const double max_lr = get("max_lr"), total = get("total_steps");
  const double initial = max_lr / get("div_factor"), min_lr = initial / get("final_div_factor");
  const double up_end = get("pct_start") * total - 1, down_end = total - 1;
  auto anneal = get("anneal_strategy") == 0 ? cos_anneal : linear_anneal;
  if (step <= up_end) return anneal(initial, max_lr, step / up_end);
  return anneal(max_lr, min_lr, (step - up_end) / (down_end - up_end));
}

std::optional<double> Schedule::momentum_at(int64_t step_i) const {
  if (kind_ != "one_cycle" || get("cycle_momentum") == 0) return std::nullopt;
  const double step = static_cast<double>(step_i), total = get("total_steps");
  const double up_end = get("pct_start") * total - 1, down_end = total - 1;
  const double lo = get("base_momentum"), hi = get("max_momentum");
  auto anneal = get("anneal_strategy") == 0 ? cos_anneal : linear_anneal;
  if (step <= up_end) return anneal(hi, lo, step / up_end);
  return anneal(lo, hi, (step - up_end) / (down_end - up_end));
}

}  // namespace accel::optim
