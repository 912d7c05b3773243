// Optimizer parameter groups through the C interface (and accel.hpp's Optimizer): training with
// groups against torch.optim with the same param_groups and scheduler (Debian's python3-torch
// 1.13), the groups through save_state/load_state, and every bad input a status.
#include <gtest/gtest.h>
#include <unistd.h>
#include <accel/accel.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "accel/accel.h"
#include "accelerator_env.hpp"
#include "torch_reference.hpp"

namespace {

const char* const kNames[] = {"fc1.weight", "fc1.bias",   "ln.weight",
                              "ln.bias",    "fc2.weight", "fc2.bias"};

std::vector<float> values(const accel_model* m, const char* name) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_model_tensor(m, name, &t), ACCEL_OK) << accel_last_error_message();
  if (!t) return {};
  auto v = values_of<float>(t);
  accel_tensor_free(t);
  return v;
}

std::vector<std::vector<float>> all_values(const accel_model* m) {
  std::vector<std::vector<float>> out;
  for (const char* n : kNames) out.push_back(values(m, n));
  return out;
}

// fc1 (4 -> 3), a LayerNorm and a head fc2 (3 -> 2), with seeded initial weights.
accel_model* make_model() {
  accel_model* m = nullptr;
  EXPECT_EQ(accel_set_seed(g_acc, 5, false), ACCEL_OK);
  EXPECT_EQ(accel_model_new(&m), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "fc1", "linear", "in_features=4 out_features=3"), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "ln", "layer_norm", "normalized_shape=3"), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "fc2", "linear", "in_features=3 out_features=2"), ACCEL_OK);
  EXPECT_EQ(accel_model_define(m,
                               "def loss(self, x):\n"
                               "    h = torch.relu(self.ln.forward(self.fc1.forward(x)))\n"
                               "    return self.fc2.forward(h).pow(2).mean()\n"),
            ACCEL_OK)
      << accel_last_error_message();
  return m;
}

accel_tensor* input() {
  std::vector<float> xv(5 * 4);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(std::sin(0.7 * i));
  const int64_t shape[] = {5, 4};
  accel_tensor* x = nullptr;
  EXPECT_EQ(accel_tensor_from_data(xv.data(), xv.size() * 4, ACCEL_DTYPE_F32, shape, 2, &x),
            ACCEL_OK);
  return x;
}

// The classic groups: no weight decay on biases and LayerNorm weights (group 1), another rate for
// the head's weight (group 2); group 0 is fc1.weight.
void add_classic_groups(accel_optimizer* o) {
  const char* no_decay[] = {"fc1.bias", "ln.weight", "ln.bias", "fc2.bias"};
  const char* head[] = {"fc2.weight"};
  size_t g = 0;
  OK(accel_optimizer_add_group(o, no_decay, 4, &g));
  EXPECT_EQ(g, 1u);
  OK(accel_optimizer_set_group(o, 1, "weight_decay", "0"));
  OK(accel_optimizer_add_group(o, head, 1, &g));
  EXPECT_EQ(g, 2u);
  OK(accel_optimizer_set_group(o, 2, "lr", "0.05"));
}

void train(accel_model* m, accel_optimizer* o, accel_scheduler* s, accel_tensor* x, int steps) {
  for (int i = 0; i < steps; ++i) {
    accel_tensor* loss = call_one(m, "loss", {x});
    ASSERT_NE(loss, nullptr);
    OK(accel_backward(g_acc, loss));
    OK(accel_optimizer_step(o));
    if (s) {
      OK(accel_scheduler_step(s));
    }
    OK(accel_optimizer_zero_grad(o));
    accel_tensor_free(loss);
  }
}

std::string list(const std::vector<float>& v) {
  std::ostringstream out;
  out.precision(9);
  out << "[";
  for (float f : v) out << f << ",";
  out << "]";
  return out.str();
}

// The same model in torch with the weights `w` and `optimizer` (Python building `opt` from the
// groups no_decay and head and the rest), `steps` steps with a linear warmup (2 of 6 steps) when
// `schedule`; prints the weights, then each group's rate.
std::vector<double> torch_run(const std::vector<std::vector<float>>& w,
                              const std::string& optimizer, bool schedule, int steps) {
  std::ostringstream code;
  code << "import math\nfc1 = torch.nn.Linear(4, 3)\nln = torch.nn.LayerNorm(3)\n"
       << "fc2 = torch.nn.Linear(3, 2)\nps = [fc1.weight, fc1.bias, ln.weight, ln.bias, "
       << "fc2.weight, fc2.bias]\nw = [";
  for (const auto& v : w) code << list(v) << ",";
  code << "]\nwith torch.no_grad():\n    for p, v in zip(ps, w):\n"
       << "        p.copy_(torch.tensor(v).view_as(p))\n"
       << "x = torch.tensor([math.sin(0.7 * i) for i in range(20)], dtype=torch.float32)"
       << ".view(5, 4)\nrest = [fc1.weight]\nno_decay = [fc1.bias, ln.weight, ln.bias, fc2.bias]\n"
       << "head = [fc2.weight]\nopt = " << optimizer << "\n";
  if (schedule)
    code << "f = lambda s: s / 2 if s < 2 else max(0.0, (6 - s) / 4)\n"
         << "sched = torch.optim.lr_scheduler.LambdaLR(opt, f)\n";
  code << "for _ in range(" << steps << "):\n"
       << "    fc2(torch.relu(ln(fc1(x)))).pow(2).mean().backward()\n"
       << "    opt.step()\n"
       << (schedule ? "    sched.step()\n" : "") << "    opt.zero_grad()\n"
       << "print(' '.join(repr(v) for p in ps for v in p.detach().flatten().tolist()))\n"
       << "print(' '.join(repr(g['lr']) for g in opt.param_groups))\n";
  return python_numbers(code.str());
}

void expect_torch(const accel_model* m, const accel_optimizer* o, const std::vector<double>& ref) {
  std::vector<double> ours;
  for (const auto& v : all_values(m)) ours.insert(ours.end(), v.begin(), v.end());
  size_t groups = 0;
  EXPECT_EQ(accel_optimizer_group_count(o, &groups), ACCEL_OK);
  ASSERT_EQ(ref.size(), ours.size() + groups);
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_NEAR(ours[i], ref[i], 1e-6 + 1e-5 * std::abs(ref[i])) << "weight " << i;
  for (size_t g = 0; g < groups; ++g) {
    double lr = 0;
    EXPECT_EQ(accel_optimizer_group_lr(o, g, &lr), ACCEL_OK);
    EXPECT_NEAR(lr, ref[ours.size() + g], 1e-12) << "group " << g;
  }
}

}  // namespace

TEST(ParamGroups, AdamWWithTheClassicGroupsAndAWarmupEqualsTorch) {
  init_with({});
  accel_model* m = make_model();
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "adamw", &o));
  OK(accel_optimizer_set(o, "lr", "0.01"));
  OK(accel_optimizer_set(o, "weight_decay", "0.01"));
  add_classic_groups(o);
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "linear", &s));
  OK(accel_scheduler_set(s, "warmup_steps", "2"));
  OK(accel_scheduler_set(s, "total_steps", "6"));
  double lr = -1;
  OK(accel_optimizer_group_lr(o, 2, &lr));
  EXPECT_EQ(lr, 0.0) << "every group starts its warmup at 0";
  const auto initial = all_values(m);
  void* objs[] = {m, o, s};
  OK(accel_prepare(g_acc, objs, 3));
  accel_tensor* x = input();
  train(m, o, s, x, 4);
  const auto ref = torch_run(initial,
                             "torch.optim.AdamW([{'params': rest}, {'params': no_decay, "
                             "'weight_decay': 0.0}, {'params': head, 'lr': 0.05}], lr=0.01, "
                             "weight_decay=0.01)",
                             true, 4);
  expect_torch(m, o, ref);
  OK(accel_scheduler_lr(s, &lr));
  EXPECT_NEAR(lr, 0.01 * 2 / 4, 1e-15) << "accel_scheduler_lr is group 0's";
  OK(accel_optimizer_lr(o, &lr));
  EXPECT_NEAR(lr, 0.005, 1e-15);
  OK(accel_optimizer_group_lr(o, 2, &lr));
  EXPECT_NEAR(lr, 0.05 * 2 / 4, 1e-15);
  accel_tensor_free(x);
  accel_scheduler_free(s);
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST(ParamGroups, SgdWithALearningRateAGroupEqualsTorch) {
  init_with({});
  accel_model* m = make_model();
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  OK(accel_optimizer_set(o, "lr", "0.1"));
  OK(accel_optimizer_set(o, "momentum", "0.9"));
  add_classic_groups(o);  // group 2's lr 0.05
  OK(accel_optimizer_set_group(o, 1, "lr", "0.2"));
  OK(accel_optimizer_set_group(o, 1, "momentum", "0"));
  const auto initial = all_values(m);
  void* objs[] = {m, o};
  OK(accel_prepare(g_acc, objs, 2));
  accel_tensor* x = input();
  train(m, o, nullptr, x, 3);
  const auto ref = torch_run(initial,
                             "torch.optim.SGD([{'params': rest}, {'params': no_decay, 'lr': 0.2, "
                             "'momentum': 0.0}, {'params': head, 'lr': 0.05}], lr=0.1, "
                             "momentum=0.9)",
                             false, 3);
  expect_torch(m, o, ref);
  accel_tensor_free(x);
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST(ParamGroups, SaveStateLoadStateKeepsTheGroupsOptionsAndRates) {
  const std::string dir = ::testing::TempDir() + "param_groups_state";
  std::system(("rm -rf " + dir).c_str());
  init_with({});
  accel_model* m = make_model();
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "adamw", &o));
  OK(accel_optimizer_set(o, "lr", "0.01"));
  add_classic_groups(o);
  OK(accel_optimizer_set_group(o, 2, "beta1", "0.5"));
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "linear", &s));
  OK(accel_scheduler_set(s, "warmup_steps", "2"));
  OK(accel_scheduler_set(s, "total_steps", "10"));
  void* objs[] = {m, o, s};
  OK(accel_prepare(g_acc, objs, 3));
  accel_tensor* x = input();
  auto group_lrs = [&] {
    std::vector<double> lrs(3);
    for (size_t g = 0; g < 3; ++g) EXPECT_EQ(accel_optimizer_group_lr(o, g, &lrs[g]), ACCEL_OK);
    return lrs;
  };
  train(m, o, s, x, 3);
  const auto lrs_at_save = group_lrs();
  OK(accel_save_state(g_acc, dir.c_str()));
  train(m, o, s, x, 3);
  const auto after = all_values(m);
  // Spoil every group's options: the load must bring back the saved ones.
  for (size_t g = 0; g < 3; ++g) {
    OK(accel_optimizer_set_group(o, g, "weight_decay", "0.5"));
    OK(accel_optimizer_set_group(o, g, "beta1", "0.1"));
    OK(accel_optimizer_set_group(o, g, "lr", "3"));
  }
  OK(accel_load_state(g_acc, dir.c_str()));
  EXPECT_EQ(group_lrs(), lrs_at_save);
  train(m, o, s, x, 3);
  EXPECT_EQ(all_values(m), after) << "bitwise the same steps after the resume";

  // Another run whose optimizer has other groups cannot load it.
  init_with({});
  accel_model* m2 = make_model();
  accel_optimizer* o2 = nullptr;
  OK(accel_optimizer_new(m2, "adamw", &o2));
  const char* head[] = {"fc2.weight", "fc2.bias"};
  size_t g = 0;
  OK(accel_optimizer_add_group(o2, head, 2, &g));
  accel_scheduler* s2 = nullptr;
  OK(accel_scheduler_new(o2, "linear", &s2));
  OK(accel_scheduler_set(s2, "total_steps", "10"));
  void* objs2[] = {m2, o2, s2};
  OK(accel_prepare(g_acc, objs2, 3));
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("3 parameter group(s)"), std::string::npos)
      << accel_last_error_message();
  accel_tensor_free(x);
  for (auto* sched : {s, s2}) accel_scheduler_free(sched);
  for (auto* opt : {o, o2}) accel_optimizer_free(opt);
  for (auto* model : {m, m2}) accel_model_free(model);
}

TEST(ParamGroups, BadGroupsAreStatusesNamingTheParameter) {
  auto expect = [](accel_status got, accel_status want, const std::string& fragment) {
    EXPECT_EQ(got, want) << accel_status_name(got) << ": " << accel_last_error_message();
    EXPECT_NE(std::string(accel_last_error_message()).find(fragment), std::string::npos)
        << accel_last_error_message();
  };
  init_with({});
  accel_model* m = make_model();
  OK(accel_model_add_layer(m, "bn", "batch_norm2d", "num_features=2"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  size_t g = 99;
  const char* unknown[] = {"fc1.bias", "fc3.weight"};
  expect(accel_optimizer_add_group(o, unknown, 2, &g), ACCEL_ERR_INVALID_ARGUMENT,
         "no parameter 'fc3.weight'");
  const char* buffer[] = {"bn.running_mean"};
  expect(accel_optimizer_add_group(o, buffer, 1, &g), ACCEL_ERR_INVALID_ARGUMENT,
         "no parameter 'bn.running_mean'");
  const char* twice[] = {"fc1.bias", "fc1.bias"};
  expect(accel_optimizer_add_group(o, twice, 2, &g), ACCEL_ERR_INVALID_ARGUMENT,
         "'fc1.bias' is named twice");
  expect(accel_optimizer_add_group(o, twice, 0, &g), ACCEL_ERR_INVALID_ARGUMENT,
         "at least one parameter");
  const char* with_null[] = {"fc1.bias", nullptr};
  expect(accel_optimizer_add_group(o, with_null, 2, &g), ACCEL_ERR_INVALID_ARGUMENT,
         "names[1] is NULL");
  EXPECT_EQ(g, 99u) << "no group made";
  size_t count = 0;
  OK(accel_optimizer_group_count(o, &count));
  EXPECT_EQ(count, 1u);
  const char* bias[] = {"fc1.bias", "bn.bias"};
  OK(accel_optimizer_add_group(o, bias, 2, &g));
  EXPECT_EQ(g, 1u);
  expect(accel_optimizer_add_group(o, bias + 1, 1, &g), ACCEL_ERR_INVALID_ARGUMENT,
         "'bn.bias' is in group 1 already");
  expect(accel_optimizer_set_group(o, 2, "lr", "0.1"), ACCEL_ERR_INVALID_ARGUMENT,
         "there is no group 2");
  double lr = 0;
  expect(accel_optimizer_group_lr(o, 2, &lr), ACCEL_ERR_INVALID_ARGUMENT, "there is no group 2");
  expect(accel_optimizer_set_group(o, 1, "lr", "-1"), ACCEL_ERR_INVALID_ARGUMENT,
         "group 1: 'lr' must not be negative");
  expect(accel_optimizer_set_group(o, 1, "beta1", "0.5"), ACCEL_ERR_INVALID_ARGUMENT,
         "unknown option 'beta1'");
  expect(accel_optimizer_set_group(o, 1, "nesterov", "true"), ACCEL_ERR_INVALID_ARGUMENT,
         "group 1: nesterov needs momentum > 0");
  expect(accel_optimizer_set_group(o, 1, "lr", "fast"), ACCEL_ERR_INVALID_ARGUMENT,
         "'lr=fast' is not a number");

  // Once a scheduler drives the optimizer, no more groups; nor once it is prepared.
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "constant", &s));
  const char* head[] = {"fc2.weight"};
  expect(accel_optimizer_add_group(o, head, 1, &g), ACCEL_ERR_STATE, "before a scheduler");
  accel_optimizer* p = nullptr;
  OK(accel_optimizer_new(m, "sgd", &p));
  void* objs[] = {m, p};
  OK(accel_prepare(g_acc, objs, 2));
  expect(accel_optimizer_add_group(p, head, 1, &g), ACCEL_ERR_STATE, "before accel_prepare");
  accel_scheduler_free(s);
  accel_optimizer_free(p);
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST(ParamGroups, UnpreparedGroupsAfterAZeroGradButNotAfterAStep) {
  init_with({});
  accel_model* m = make_model();
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  OK(accel_optimizer_set(o, "lr", "0.1"));
  OK(accel_optimizer_zero_grad(o));  // binds it to the parameters
  const char* head[] = {"fc2.weight", "fc2.bias"};
  size_t g = 0;
  OK(accel_optimizer_add_group(o, head, 2, &g));
  OK(accel_optimizer_set_group(o, g, "lr", "0"));
  const auto before = all_values(m);
  accel_tensor* x = input();
  accel_tensor* loss = call_one(m, "loss", {x});
  ASSERT_NE(loss, nullptr);
  OK(accel_backward(g_acc, loss));
  OK(accel_optimizer_step(o));
  const auto after = all_values(m);
  EXPECT_NE(after[0], before[0]) << "group 0 stepped";
  EXPECT_EQ(after[4], before[4]) << "the head's lr is 0";
  EXPECT_EQ(after[5], before[5]);
  const char* ln[] = {"ln.weight"};
  EXPECT_EQ(accel_optimizer_add_group(o, ln, 1, &g), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("before the first step"),
            std::string::npos);
  accel_tensor_free(loss);
  accel_tensor_free(x);
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST(ParamGroups, CppOptimizerWrapsTheGroups) {
  accel::Model m;
  m.add_layer("fc", "linear", "in_features=2 out_features=2");
  accel::Optimizer o(m, "adamw");
  o.set("lr", "0.01");
  EXPECT_EQ(o.group_count(), 1u);
  EXPECT_EQ(o.add_group({"fc.bias"}), 1u);
  o.set_group(1, "weight_decay", "0").set_group(1, "lr", "0.03");
  EXPECT_EQ(o.group_count(), 2u);
  EXPECT_EQ(o.group_lr(0), 0.01);
  EXPECT_EQ(o.group_lr(1), 0.03);
  try {
    o.add_group({"fc.nothing"});
    ADD_FAILURE() << "no error";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("fc.nothing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(o.group_lr(2), accel::Error);
}
