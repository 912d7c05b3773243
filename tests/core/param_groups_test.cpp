// Optimizer parameter groups: every kind with two groups against torch.optim with the same
// param_groups (Debian's python3-torch 1.13, param_groups_reference.py), schedulers scaling each
// group's base rate as PyTorch's do, ZeRO-sharded steps, the groups through the checkpoint
// functions, and the errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"

using accel::Errc;
using accel::optim::LrScheduler;
using accel::optim::Optimizer;
using accel::optim::Schedule;

namespace {

constexpr int kSteps = 5;
using Options = std::vector<std::pair<const char*, const char*>>;

// "<case> <name>" -> the values the reference printed.
const std::map<std::string, std::vector<double>>& reference() {
  static const auto values = [] {
    const std::string cmd = std::string("/usr/bin/python3 ") + PARAM_GROUPS_REFERENCE + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    EXPECT_EQ(p ? pclose(p) : -1, 0) << "the reference needs Debian's python3-torch:\n" << out;
    std::map<std::string, std::vector<double>> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string c, name;
      words >> c >> name;
      for (std::string x; words >> x;) v[c + " " + name].push_back(std::stod(x));
    }
    return v;
  }();
  return values;
}

// The reference's parameters and gradients, float for float.
std::vector<at::Tensor> make_params() {
  std::vector<float> w, b, h;
  for (int i = 0; i < 12; ++i) w.push_back(static_cast<float>(std::sin(0.1 * i)));
  for (int i = 0; i < 3; ++i) b.push_back(static_cast<float>(std::cos(0.2 * i)));
  for (int i = 0; i < 2; ++i) h.push_back(static_cast<float>(0.5 * i - 0.3));
  auto t = [](const std::vector<float>& v, std::vector<int64_t> shape) {
    return at::tensor(v, at::kFloat).view(shape).clone().requires_grad_(true);
  };
  return {t(w, {3, 4}), t(b, {3}), t(h, {2})};
}

void set_grads(std::vector<at::Tensor>& params, int k) {
  for (size_t j = 0; j < params.size(); ++j) {
    std::vector<float> g;
    for (int64_t i = 0; i < params[j].numel(); ++i)
      g.push_back(static_cast<float>(std::sin(0.3 * i + k + 0.7 * j) * 0.5));
    params[j].mutable_grad() = at::tensor(g, at::kFloat).view(params[j].sizes());
  }
}

std::shared_ptr<Optimizer> make_optimizer(const std::string& kind, const Options& defaults,
                                          const std::vector<std::string>& group1,
                                          const Options& group1_options) {
  auto o = std::make_shared<Optimizer>(kind);
  o->set_parameter_names([] {
    return std::vector<std::pair<std::string, bool>>{{"w", true}, {"b", true}, {"h", true}};
  });
  for (const auto& [k, v] : defaults) o->set(k, v);
  EXPECT_EQ(o->add_group(group1), 1u);
  for (const auto& [k, v] : group1_options) o->set_group(1, k, v);
  return o;
}

// Steps as the reference does and compares the parameters, and each group's rate (and momentum)
// at construction and after each scheduler step.
void expect_reference(const std::string& name, Optimizer& o, std::vector<at::Tensor>& params,
                      LrScheduler* sched = nullptr, bool momentum = false) {
  SCOPED_TRACE(name);
  const auto& ref = reference();
  std::vector<std::vector<double>> lrs(o.group_count()), moms(o.group_count());
  const char* mkey = o.kind() == "sgd" ? "momentum" : "beta1";
  auto record = [&] {
    for (size_t g = 0; g < o.group_count(); ++g) {
      lrs[g].push_back(o.group_lr(g));
      if (momentum) moms[g].push_back(o.group_option(g, mkey));
    }
  };
  record();
  for (int k = 0; k < kSteps; ++k) {
    set_grads(params, k);
    o.step();
    if (sched) sched->step();
    record();
  }
  for (size_t j = 0; j < params.size(); ++j) {
    const auto& want = ref.at(name + " p" + std::to_string(j));
    const auto got = params[j].detach().flatten().contiguous();
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i].item<float>(), want[i], 2e-7 + 1e-6 * std::abs(want[i]))
          << "p" << j << "[" << i << "]";
  }
  for (size_t g = 0; g < o.group_count(); ++g) {
    const auto& want = ref.at(name + " lr" + std::to_string(g));
    ASSERT_EQ(lrs[g].size(), want.size());
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(lrs[g][s], want[s], 1e-12 + 1e-12 * want[s]) << "lr of group " << g << " " << s;
    if (!momentum) continue;
    const auto& want_m = ref.at(name + " m" + std::to_string(g));
    for (size_t s = 0; s < want_m.size(); ++s)
      EXPECT_NEAR(moms[g][s], want_m[s], 1e-12) << "momentum of group " << g << " step " << s;
  }
}

std::shared_ptr<Optimizer> two_sgd_groups() {
  return make_optimizer("sgd", {{"lr", "0.1"}, {"momentum", "0.9"}}, {"h"}, {{"lr", "0.02"}});
}

void expect_error(Errc code, const std::string& fragment, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying '" << fragment << "'";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ParamGroups, EveryKindWithTwoGroupsEqualsTorchOptim) {
  struct Case {
    const char* kind;
    Options defaults;
    std::vector<std::string> group1;
    Options group1_options;
  };
  const std::vector<Case> cases = {
      {"adamw", {{"lr", "0.01"}, {"weight_decay", "0.01"}}, {"b", "h"}, {{"weight_decay", "0"}}},
      {"sgd",
       {{"lr", "0.1"}, {"momentum", "0.9"}, {"dampening", "0.1"}},
       {"h"},
       {{"lr", "0.01"}, {"momentum", "0.5"}, {"weight_decay", "0.1"}}},
      {"adam",
       {{"lr", "0.02"}},
       {"b"},
       {{"beta1", "0.8"}, {"beta2", "0.99"}, {"eps", "1e-6"}, {"amsgrad", "true"}}},
      {"rmsprop",
       {{"lr", "0.01"}},
       {"b", "h"},
       {{"alpha", "0.9"}, {"momentum", "0.5"}, {"centered", "true"}, {"lr", "0.005"}}},
      {"adagrad",
       {{"lr", "0.05"}, {"initial_accumulator_value", "0.1"}},
       {"h"},
       {{"lr_decay", "0.01"}, {"weight_decay", "0.05"}, {"lr", "0.1"}}},
  };
  for (const auto& c : cases) {
    auto params = make_params();
    auto o = make_optimizer(c.kind, c.defaults, c.group1, c.group1_options);
    o->bind(params);
    expect_reference(c.kind, *o, params);
  }
}

TEST(ParamGroups, SchedulersScaleEachGroupsBaseRateAsPyTorchs) {
  const std::vector<std::pair<std::string, Options>> schedules = {
      {"warmup", {{"warmup_steps", "2"}, {"total_steps", "6"}}},
      {"polynomial",
       {{"warmup_steps", "1"}, {"total_steps", "6"}, {"lr_end", "0.001"}, {"power", "2"}}},
      {"step", {{"step_size", "2"}, {"gamma", "0.5"}}},
  };
  for (const auto& [name, options] : schedules) {
    auto params = make_params();
    auto o = two_sgd_groups();
    Schedule s(name == "warmup" ? "linear" : name);
    for (const auto& [k, v] : options) s.set(k, v);
    LrScheduler sched(s, o);
    EXPECT_EQ(sched.base_lr(0), 0.1);
    EXPECT_EQ(sched.base_lr(1), 0.02);
    o->bind(params);
    expect_reference(name, *o, params, &sched);
  }
}

TEST(ParamGroups, OneCycleSetsEveryGroupToItsOneRateAndCyclesEveryGroupsMomentum) {
  {
    auto params = make_params();
    auto o = two_sgd_groups();
    Schedule s("one_cycle");
    s.set("max_lr", "0.5");
    s.set("total_steps", "6");
    LrScheduler sched(s, o);
    o->bind(params);
    expect_reference("onecycle", *o, params, &sched, true);
  }
  auto params = make_params();
  auto o = make_optimizer("adamw", {{"lr", "0.01"}, {"weight_decay", "0.01"}}, {"b", "h"},
                          {{"weight_decay", "0"}, {"lr", "0.003"}});
  Schedule s("one_cycle");
  s.set("max_lr", "0.05");
  s.set("total_steps", "6");
  LrScheduler sched(s, o);
  o->bind(params);
  expect_reference("onecycle_adamw", *o, params, &sched, true);
}

TEST(ParamGroups, ZeroShardedStepsEqualTheWholeOptimizersBitForBit) {
  // Two ranks' worth of ZeRO stage 1 in one process: each optimizer steps the parameters it owns
  // (of both groups), with each one's group options.
  const std::vector<bool> owned_a = {true, false, true};
  auto whole_params = make_params(), a_params = make_params(), b_params = make_params();
  auto options = Options{{"lr", "0.01"}, {"weight_decay", "0.01"}};
  auto whole =
      make_optimizer("adamw", options, {"b", "h"}, {{"weight_decay", "0"}, {"lr", "0.03"}});
  auto a = make_optimizer("adamw", options, {"b", "h"}, {{"weight_decay", "0"}, {"lr", "0.03"}});
  auto b = make_optimizer("adamw", options, {"b", "h"}, {{"weight_decay", "0"}, {"lr", "0.03"}});
  whole->bind(whole_params);
  a->bind(a_params);
  b->bind(b_params);
  a->shard(owned_a);
  b->shard({false, true, false});
  for (int k = 0; k < kSteps; ++k) {
    for (auto* ps : {&whole_params, &a_params, &b_params}) set_grads(*ps, k);
    whole->step();
    a->step();
    b->step();
  }
  for (size_t j = 0; j < whole_params.size(); ++j) {
    const at::Tensor& stepped = owned_a[j] ? a_params[j] : b_params[j];
    const at::Tensor& untouched = owned_a[j] ? b_params[j] : a_params[j];
    EXPECT_TRUE(at::equal(stepped, whole_params[j])) << j;
    EXPECT_TRUE(at::equal(untouched, make_params()[j])) << j;
  }
}

TEST(ParamGroups, GroupsRideInTheCheckpointOptions) {
  auto params = make_params();
  auto o = make_optimizer("sgd", {{"lr", "0.1"}, {"momentum", "0.9"}}, {"b", "h"},
                          {{"lr", "0.02"}, {"weight_decay", "0.1"}});
  Schedule s("linear");
  s.set("warmup_steps", "2");
  s.set("total_steps", "10");
  auto sched = std::make_shared<LrScheduler>(s, o);
  o->bind(params);
  for (int k = 0; k < 3; ++k) {
    set_grads(params, k);
    o->step();
    sched->step();
  }
  const auto options = o->options();
  EXPECT_EQ(options.at("lr"), o->group_lr(0));
  EXPECT_EQ(options.at("group1.lr"), o->group_lr(1));
  EXPECT_EQ(options.at("group1.weight_decay"), 0.1);
  EXPECT_EQ(options.at("group1.params"), 2);
  EXPECT_EQ(options.at("group1.initial_lr"), 0.02);
  EXPECT_EQ(options.count("group0.lr") + options.count("group2.lr"), 0u);
  const auto state = o->state_tensors();

  // A new run with the same groups, other options and a scheduler at step 0 resumes exactly.
  auto resumed_params = make_params();
  auto r = make_optimizer("sgd", {{"lr", "0.5"}, {"momentum", "0.9"}}, {"b", "h"},
                          {{"lr", "0.7"}, {"weight_decay", "0.3"}});
  auto rsched = std::make_shared<LrScheduler>(s, r);
  r->bind(resumed_params);
  for (size_t j = 0; j < params.size(); ++j) resumed_params[j].detach().copy_(params[j]);
  auto staged = r->stage_state(options, state);
  rsched->check_restore(sched->steps(), sched->base_lr());
  r->apply_state(*staged);
  rsched->restore(sched->steps(), sched->base_lr());
  EXPECT_EQ(r->group_option(1, "weight_decay"), 0.1);
  EXPECT_EQ(rsched->base_lr(1), 0.02);
  EXPECT_EQ(r->group_lr(0), o->group_lr(0));
  EXPECT_EQ(r->group_lr(1), o->group_lr(1));
  for (int k = 3; k < 6; ++k) {
    set_grads(params, k);
    set_grads(resumed_params, k);
    o->step();
    sched->step();
    r->step();
    rsched->step();
  }
  for (size_t j = 0; j < params.size(); ++j)
    EXPECT_TRUE(at::equal(params[j], resumed_params[j])) << j;
}

TEST(ParamGroups, CheckpointsOfOtherGroupsAreRefused) {
  auto params = make_params();
  auto o = make_optimizer("adamw", {}, {"b", "h"}, {{"weight_decay", "0"}});
  o->bind(params);
  const auto options = o->options();
  auto edited = [&](const std::string& key, std::optional<double> v) {
    auto copy = options;
    if (v)
      copy[key] = *v;
    else
      copy.erase(key);
    return copy;
  };
  // One group only (a checkpoint from before groups), or three.
  auto single = std::make_shared<Optimizer>("adamw");
  expect_error(Errc::state, "the checkpoint has 2 parameter group(s), this optimizer 1",
               [&] { single->check_saved_options(options); });
  auto base = options;
  for (auto it = base.begin(); it != base.end();)
    it = it->first.rfind("group", 0) == 0 ? base.erase(it) : std::next(it);
  expect_error(Errc::state, "the checkpoint has 1 parameter group(s), this optimizer 2",
               [&] { o->check_saved_options(base); });
  expect_error(Errc::state, "has 3 parameter group(s)",
               [&] { o->check_saved_options(edited("group2.lr", 0.1)); });
  expect_error(Errc::state, "group 1 has 3 parameter(s) in the checkpoint and 2 here",
               [&] { o->check_saved_options(edited("group1.params", 3)); });
  expect_error(Errc::invalid_argument, "lack 'group1.params'",
               [&] { o->check_saved_options(edited("group1.params", std::nullopt)); });
  expect_error(Errc::invalid_argument, "lack 'group1.eps'",
               [&] { o->check_saved_options(edited("group1.eps", std::nullopt)); });
  expect_error(Errc::invalid_argument, "saved option 'group1.momentum' is unknown",
               [&] { o->check_saved_options(edited("group1.momentum", 0.1)); });
  expect_error(Errc::invalid_argument, "group 1: 'beta1' must be below 1",
               [&] { o->check_saved_options(edited("group1.beta1", 1.5)); });
  expect_error(Errc::invalid_argument, "group 1: 'initial_lr' must not be negative",
               [&] { o->check_saved_options(edited("group1.initial_lr", -1)); });
  expect_error(Errc::invalid_argument, "saved option 'groupx.lr' is unknown",
               [&] { o->check_saved_options(edited("groupx.lr", 1)); });
  o->check_saved_options(options);
}

TEST(ParamGroups, BadGroupsAreClearErrors) {
  auto o = make_optimizer("adamw", {}, {"b"}, {});
  expect_error(Errc::invalid_argument, "no parameter 'nope'", [&] { o->add_group({"h", "nope"}); });
  expect_error(Errc::invalid_argument, "'h' is named twice", [&] { o->add_group({"h", "h"}); });
  expect_error(Errc::invalid_argument, "'b' is in group 1 already", [&] { o->add_group({"b"}); });
  expect_error(Errc::invalid_argument, "at least one parameter", [&] { o->add_group({}); });
  expect_error(Errc::invalid_argument, "there is no group 2", [&] { o->set_group(2, "lr", "1"); });
  expect_error(Errc::invalid_argument, "there is no group 2", [&] { o->group_lr(2); });
  expect_error(Errc::invalid_argument, "group 1: 'lr' must not be negative",
               [&] { o->set_group(1, "lr", "-1"); });
  expect_error(Errc::invalid_argument, "unknown option 'momentum'",
               [&] { o->set_group(1, "momentum", "0.5"); });
  EXPECT_EQ(o->group_count(), 2u);
  // The parameter in group 0 can be moved to a new group; a group takes the defaults of its time.
  o->set("weight_decay", "0.2");
  o->set_group(0, "eps", "1e-3");
  EXPECT_EQ(o->add_group({"w"}), 2u);
  EXPECT_EQ(o->group_option(2, "weight_decay"), 0.2);
  EXPECT_EQ(o->group_option(2, "eps"), 1e-8) << "set_group(0, ...) leaves the defaults";
  EXPECT_EQ(o->group_option(1, "weight_decay"), 0.01) << "made before the set";

  // Bound by a zero_grad only: still open to groups; once stepped, closed.
  auto params = make_params();
  auto p = make_optimizer("sgd", {{"lr", "0.1"}}, {"b"}, {{"lr", "0.5"}});
  p->bind(params);
  EXPECT_EQ(p->add_group({"h"}), 2u);
  set_grads(params, 0);
  const auto before = params[2].detach().clone();
  p->step();
  EXPECT_TRUE(at::allclose(params[2], before - 0.1 * params[2].grad()));
  expect_error(Errc::state, "before the first step", [&] { p->add_group({"w"}); });

  // A scheduler takes the groups' base rates: no group after it.
  auto q = make_optimizer("sgd", {}, {"b"}, {});
  LrScheduler sched(Schedule("constant"), q);
  expect_error(Errc::state, "before a scheduler", [&] { q->add_group({"h"}); });

  // Without the model's names (an optimizer made below the C ABI without them).
  Optimizer bare("sgd");
  expect_error(Errc::internal, "names", [&] { bare.add_group({"w"}); });
}

TEST(ParamGroups, FrozenParametersInAGroupAreLeftOut) {
  auto o = std::make_shared<Optimizer>("sgd");
  o->set_parameter_names([] {
    return std::vector<std::pair<std::string, bool>>{
        {"w", true}, {"f", false}, {"b", true}, {"h", true}};
  });
  o->set("lr", "0.1");
  EXPECT_EQ(o->add_group({"f", "h"}), 1u);
  o->set_group(1, "lr", "0.01");
  auto params = make_params();
  o->bind(params);
  set_grads(params, 0);
  std::vector<at::Tensor> before;
  for (auto& p : params) before.push_back(p.detach().clone());
  o->step();
  EXPECT_TRUE(at::allclose(params[0], before[0] - 0.1 * params[0].grad()));
  EXPECT_TRUE(at::allclose(params[1], before[1] - 0.1 * params[1].grad()));
  EXPECT_TRUE(at::allclose(params[2], before[2] - 0.01 * params[2].grad()));
}
