// Models, optimizers, schedulers and the training step through the C interface, in one process;
// PyTorch (Debian's python3-torch, the same 1.13) is the reference where values must match.
#include <gtest/gtest.h>

#include <unistd.h>
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

std::vector<float> tensor_values(const accel_model* m, const char* name) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_model_tensor(m, name, &t), ACCEL_OK) << accel_last_error_message();
  int64_t n = 0;
  accel_tensor_element_count(t, &n);
  std::vector<float> v(static_cast<size_t>(n));
  size_t size = 0;
  accel_tensor_to_data(t, v.data(), v.size() * sizeof(float), &size);
  accel_tensor_free(t);
  return v;
}

accel_tensor* f32(std::vector<float> v, std::vector<int64_t> shape) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_from_data(v.data(), v.size() * 4, ACCEL_DTYPE_F32, shape.data(),
                                   shape.size(), &t),
            ACCEL_OK);
  return t;
}

}  // namespace

TEST(Train, LayersAreInitialisedExactlyAsTorchNn) {
  OK(accel_set_seed(g_acc, 0, false));
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=5 out_features=3"));
  OK(accel_model_add_layer(m, "conv", "conv2d", "in_channels=2 out_channels=4 kernel_size=3"));
  OK(accel_model_add_layer(m, "emb", "embedding", "num_embeddings=6 embedding_dim=2"));
  OK(accel_model_add_layer(m, "bn", "batch_norm2d", "num_features=4"));
  OK(accel_model_add_layer(m, "ln", "layer_norm", "normalized_shape=3"));
  const auto ref = python_numbers(
      "torch.manual_seed(0)\n"
      "ms = [torch.nn.Linear(5, 3), torch.nn.Conv2d(2, 4, 3), torch.nn.Embedding(6, 2)]\n"
      "for m in ms:\n"
      "    for p in m.parameters():\n"
      "        print(' '.join(repr(x) for x in p.detach().flatten().tolist()))\n");
  std::vector<float> ours;
  for (const char* n : {"fc.weight", "fc.bias", "conv.weight", "conv.bias", "emb.weight"}) {
    const auto v = tensor_values(m, n);
    ours.insert(ours.end(), v.begin(), v.end());
  }
  ASSERT_EQ(ours.size(), ref.size());
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_EQ(ours[i], static_cast<float>(ref[i])) << "element " << i << " (bitwise, same seed)";
  EXPECT_EQ(tensor_values(m, "bn.running_var"), std::vector<float>(4, 1.0f));
  EXPECT_EQ(tensor_values(m, "ln.weight"), std::vector<float>(3, 1.0f));
  int64_t n = 0;
  OK(accel_model_parameter_element_count(m, &n));
  EXPECT_EQ(n, 5 * 3 + 3 + 2 * 4 * 9 + 4 + 6 * 2 + 4 + 4 + 3 + 3);
  accel_model_free(m);
}

TEST(Train, ModelCallSaveLoadAndBadInput) {
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=4 out_features=2"));
  OK(accel_model_define(m, "def forward(self, x):\n    return self.fc.forward(x), x.sum()\n"));
  accel_tensor* x = f32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  const auto out = call_method(m, "forward", {x});
  ASSERT_EQ(out.size(), 2u);
  const auto y = values_of<float>(out[0]);
  ASSERT_EQ(y.size(), 4u);
  const std::string path = ::testing::TempDir() + "model.pt";
  OK(accel_model_save_torchscript(m, path.c_str()));
  accel_model* back = nullptr;
  OK(accel_model_load_torchscript(path.c_str(), &back));
  const auto out2 = call_method(back, "forward", {x});
  ASSERT_EQ(out2.size(), 2u);
  EXPECT_EQ(y, values_of<float>(out2[0])) << "a saved and reloaded model computes the same";
  for (auto* t : {out[0], out[1], out2[0], out2[1]}) accel_tensor_free(t);

  accel_tensor_list* list = nullptr;
  accel_tensor* wrong = f32({1, 2, 3}, {1, 3});
  EXPECT_EQ(accel_model_call(m, "forward", &wrong, 1, &list), ACCEL_ERR_SHAPE);
  EXPECT_NE(std::string(accel_last_error_message()).find("forward"), std::string::npos);
  EXPECT_EQ(list, nullptr) << "out untouched on failure";
  int64_t ints[4] = {1, 2, 3, 4};
  const int64_t ishape[] = {1, 4};
  accel_tensor* xi = nullptr;
  OK(accel_tensor_from_data(ints, sizeof ints, ACCEL_DTYPE_I64, ishape, 2, &xi));
  EXPECT_EQ(accel_model_call(m, "forward", &xi, 1, &list), ACCEL_ERR_DTYPE)
      << accel_last_error_message();
  accel_tensor_free(xi);
  EXPECT_EQ(accel_model_call(m, "missing", &x, 1, &list), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_model_define(m, "def broken(self):\n    return nn.functional.relu(1)\n"),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_model_add_layer(m, "c", "conv3d", ""), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_model_add_layer(m, "c", "linear", "in_features=2 out_feature=3"),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("out_feature"), std::string::npos);
  EXPECT_EQ(accel_model_add_layer(m, "fc", "linear", "in_features=2 out_features=3"),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_model_load_torchscript("/nonexistent/model.pt", &back), ACCEL_ERR_IO);
  accel_tensor_free(wrong);
  accel_tensor_free(x);
  accel_model_free(back);
  accel_model_free(m);
}

TEST(Train, ModelCallRunsTheMethodOnceWhateverItReturns) {
  // Each method counts its own runs in a buffer: getting its results, however many there are,
  // must never run it a second time (dropout, batch-norm statistics and buffer broadcasts are side
  // effects a binding cannot undo).
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "bn", "batch_norm2d", "num_features=1"));
  OK(accel_model_define(m,
                        "def three(self, x):\n"
                        "    self.bn.running_mean.add_(1.0)\n"
                        "    return x, x + 1.0, x + 2.0\n"
                        "def five(self, x):\n"
                        "    self.bn.running_mean.add_(1.0)\n"
                        "    return [x, x, x, x, x]\n"
                        "def nothing(self, x):\n"
                        "    self.bn.running_mean.add_(1.0)\n"));
  auto runs = [&] {
    accel_tensor* t = nullptr;
    EXPECT_EQ(accel_model_tensor(m, "bn.running_mean", &t), ACCEL_OK);
    const float v = values_of<float>(t).at(0);
    accel_tensor_free(t);
    return v;
  };
  accel_tensor* x = f32({1, 2}, {2});
  const std::pair<const char*, size_t> methods[] = {{"three", 3}, {"five", 5}, {"nothing", 0}};
  float expected = 0;
  for (const auto& [method, count] : methods) {
    accel_tensor_list* out = nullptr;
    OK(accel_model_call(m, method, &x, 1, &out));
    EXPECT_EQ(runs(), ++expected) << method << " ran once";
    size_t n = 99;
    OK(accel_tensor_list_count(out, &n));
    EXPECT_EQ(n, count) << method;
    for (size_t i = 0; i < n; ++i) {
      accel_tensor* t = nullptr;
      OK(accel_tensor_list_get(out, i, &t));
      EXPECT_EQ(values_of<float>(t),
                (std::vector<float>{1.0f + (count == 3 ? i : 0), 2.0f + (count == 3 ? i : 0)}));
      accel_tensor_free(t);
    }
    accel_tensor* beyond = nullptr;
    EXPECT_EQ(accel_tensor_list_get(out, n, &beyond), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(beyond, nullptr);
    accel_tensor_list_free(out);
    EXPECT_EQ(runs(), expected) << "reading the results ran nothing";
  }
  // The same through a prepared model (mixed precision and buffer broadcast path).
  void* objs[] = {m};
  OK(accel_prepare(g_acc, objs, 1));
  accel_tensor_list* out = nullptr;
  OK(accel_model_call(m, "five", &x, 1, &out));
  EXPECT_EQ(runs(), ++expected);
  accel_tensor_list_free(out);
  accel_tensor_free(x);
  accel_model_free(m);
  init_with({});
}

TEST(Train, LoadsAnArchiveSavedByPythonTorchJit) {
  const std::string path = ::testing::TempDir() + "from_python.pt";
  const auto ref = python_numbers(
      "torch.manual_seed(3)\n"
      "class Net(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.fc = torch.nn.Linear(4, 2)\n"
      "    def forward(self, x):\n"
      "        return torch.tanh(self.fc(x))\n"
      "m = torch.jit.script(Net())\n"
      "torch.jit.save(m, '" +
      path +
      "')\n"
      "x = torch.arange(8, dtype=torch.float32).view(2, 4) / 8\n"
      "print(' '.join(repr(v) for v in m(x).flatten().tolist()))\n");
  ASSERT_EQ(ref.size(), 4u);
  accel_model* m = nullptr;
  OK(accel_model_load_torchscript(path.c_str(), &m));
  accel_tensor* x = f32({0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875}, {2, 4});
  accel_tensor* y = nullptr;
  size_t size = 0;
  y = call_one(m, "forward", {x});
  std::vector<float> got(4);
  OK(accel_tensor_to_data(y, got.data(), 16, &size));
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], static_cast<float>(ref[i]));
  accel_tensor_free(y);
  accel_tensor_free(x);
  accel_model_free(m);
}

TEST(Train, TrainModeSwitchesDropout) {
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_define(
      m, "def forward(self, x):\n    return torch.dropout(x, 0.5, self.training)\n"));
  accel_tensor* x = f32(std::vector<float>(1000, 1.0f), {1000});
  accel_tensor* out = nullptr;
  size_t size = 0;
  std::vector<float> y(1000);
  OK(accel_model_train(m, false));
  out = call_one(m, "forward", {x});
  OK(accel_tensor_to_data(out, y.data(), 4000, &size));
  EXPECT_EQ(y, std::vector<float>(1000, 1.0f));
  accel_tensor_free(out);
  OK(accel_model_train(m, true));
  out = call_one(m, "forward", {x});
  OK(accel_tensor_to_data(out, y.data(), 4000, &size));
  int zeros = 0;
  for (float v : y) zeros += v == 0;
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  accel_tensor_free(out);
  accel_tensor_free(x);
  accel_model_free(m);
}

TEST(Train, ClipGradNormMatchesPyTorch) {
  for (const char* norm_type : {"2.0", "1.0", "inf"}) {
    accel_model* m = nullptr;
    OK(accel_model_new(&m));
    OK(accel_model_add_layer(m, "fc", "linear", "in_features=3 out_features=2"));
    OK(accel_model_define(m, "def loss(self, x):\n    return self.fc.forward(x).pow(2).sum()\n"));
    void* objs[] = {m};
    OK(accel_prepare(g_acc, objs, 1));
    const auto w = tensor_values(m, "fc.weight");
    const auto b = tensor_values(m, "fc.bias");
    accel_tensor* x = f32({1, -2, 3, 0.5, 4, -1}, {2, 3});
    accel_tensor* loss = nullptr;
    loss = call_one(m, "loss", {x});
    OK(accel_backward(g_acc, loss));
    double total = 0;
    const double type = std::string(norm_type) == "inf" ? INFINITY : std::stod(norm_type);
    OK(accel_clip_grad_norm(g_acc, m, 0.5, type, &total));
    std::ostringstream code;
    code.precision(9);
    code
        << "fc = torch.nn.Linear(3, 2)\nwith torch.no_grad():\n"
        << "    fc.weight.copy_(torch.tensor([" << w[0] << "," << w[1] << "," << w[2] << "," << w[3]
        << "," << w[4] << "," << w[5] << "]).view(2, 3))\n"
        << "    fc.bias.copy_(torch.tensor([" << b[0] << "," << b[1] << "]))\n"
        << "x = torch.tensor([1., -2, 3, 0.5, 4, -1]).view(2, 3)\nfc(x).pow(2).sum().backward()\n"
        << "print(repr(float(torch.nn.utils.clip_grad_norm_(fc.parameters(), 0.5, float('"
        << norm_type << "')))))\n"
        << "print(' '.join(repr(v) for p in fc.parameters() for v in p.grad.flatten().tolist()))\n";
    const auto ref = python_numbers(code.str());
    ASSERT_EQ(ref.size(), 9u);
    EXPECT_NEAR(total, ref[0], 1e-5 * ref[0]) << "norm type " << norm_type;
    accel_tensor_free(loss);
    accel_tensor_free(x);
    if (std::string(norm_type) == "inf") {
      EXPECT_EQ(accel_clip_grad_norm(g_acc, m, -1, 2, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
      OK(accel_clip_grad_value(g_acc, m, 0.01));
    }
    accel_model_free(m);
  }
}

TEST(Train, SchedulerStepsOnlyOnSyncStepsWithAccumulation) {
  init_with({{"gradient_accumulation_steps", "2"}});
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=2 out_features=1"));
  OK(accel_model_define(m, "def loss(self, x):\n    return self.fc.forward(x).sum()\n"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  OK(accel_optimizer_set(o, "lr", "1.0"));
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "step", &s));
  OK(accel_scheduler_set(s, "step_size", "1"));
  OK(accel_scheduler_set(s, "gamma", "0.5"));
  void* objs[] = {s, o, m};  // any order
  OK(accel_prepare(g_acc, objs, 3));
  const auto before = tensor_values(m, "fc.bias");
  std::vector<double> lrs;
  std::vector<bool> syncs;
  for (int i = 0; i < 4; ++i) {
    OK(accel_accumulate(g_acc));
    bool sync = false;
    OK(accel_sync_gradients(g_acc, &sync));
    syncs.push_back(sync);
    accel_tensor* x = f32({1, 1}, {1, 2});
    accel_tensor* loss = nullptr;
    loss = call_one(m, "loss", {x});
    OK(accel_backward(g_acc, loss));
    OK(accel_optimizer_step(o));
    OK(accel_scheduler_step(s));
    OK(accel_optimizer_zero_grad(o));
    double lr = 0;
    OK(accel_scheduler_lr(s, &lr));
    lrs.push_back(lr);
    if (i == 1) {
      // Two micro-steps of d(sum)/d(bias) = 1, each divided by 2: one step of lr 1.0 moves 1.0.
      EXPECT_NEAR(tensor_values(m, "fc.bias")[0], before[0] - 1.0f, 1e-6);
    }
    accel_tensor_free(loss);
    accel_tensor_free(x);
  }
  EXPECT_EQ(syncs, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(lrs, (std::vector<double>{1.0, 0.5, 0.5, 0.25}));
  accel_scheduler_free(s);
  accel_optimizer_free(o);
  accel_model_free(m);
  init_with({});
}

TEST(Train, Bf16AutocastReturnsFp32AndComputesInBf16) {
  init_with({{"mixed_precision", "bf16"}});
  accel_precision mp;
  OK(accel_mixed_precision(g_acc, &mp));
  EXPECT_EQ(mp, ACCEL_PRECISION_BF16);
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=64 out_features=8"));
  OK(accel_model_define(m,
                        "def forward(self, x):\n    return self.fc.forward(x)\n"
                        "def inner_element_size(self, x):\n"
                        "    return torch.tensor(self.fc.forward(x).element_size())\n"));
  std::vector<float> xv(64);
  for (int i = 0; i < 64; ++i) xv[i] = std::sin(i * 0.37f);
  accel_tensor* x = f32(xv, {1, 64});
  accel_tensor* plain = nullptr;
  size_t size = 0;
  plain = call_one(m, "forward", {x});  // not prepared: fp32
  void* objs[] = {m};
  OK(accel_prepare(g_acc, objs, 1));
  accel_tensor* mixed = nullptr;
  mixed = call_one(m, "forward", {x});
  accel_dtype dt;
  OK(accel_tensor_dtype(mixed, &dt));
  EXPECT_EQ(dt, ACCEL_DTYPE_F32) << "outputs come back in fp32";
  accel_tensor* inner = nullptr;
  inner = call_one(m, "inner_element_size", {x});
  int64_t element_size = 0;
  OK(accel_tensor_item_i64(inner, &element_size));
  EXPECT_EQ(element_size, 2) << "the linear layer ran in bf16 under autocast";
  std::vector<float> a(8), b(8);
  OK(accel_tensor_to_data(plain, a.data(), 32, &size));
  OK(accel_tensor_to_data(mixed, b.data(), 32, &size));
  EXPECT_NE(a, b) << "bf16 rounding shows";
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(a[i], b[i], 0.05);
  for (auto* t : {plain, mixed, inner, x}) accel_tensor_free(t);
  accel_model_free(m);
  init_with({});
}

TEST(Train, BadTrainingInputsAreStatuses) {
  accel_model *m = nullptr, *other = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_new(&other));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=2 out_features=1"));
  OK(accel_model_add_layer(other, "fc", "linear", "in_features=2 out_features=1"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(other, "adamw", &o));
  EXPECT_EQ(accel_optimizer_set(o, "momentum", "0.9"), ACCEL_ERR_INVALID_ARGUMENT)
      << "adamw has no momentum";
  EXPECT_EQ(accel_optimizer_set(o, "lr", "fast"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_optimizer_set(o, "beta1", "1.5"), ACCEL_ERR_INVALID_ARGUMENT);
  accel_optimizer* bad = nullptr;
  EXPECT_EQ(accel_optimizer_new(m, "lion", &bad), ACCEL_ERR_INVALID_ARGUMENT);
  // An optimizer over another model's parameters, that model not prepared.
  void* objs[] = {m, o};
  EXPECT_EQ(accel_prepare(g_acc, objs, 2), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("optimizer's model"), std::string::npos);
  accel_config* c = nullptr;
  OK(accel_config_new(&c));
  void* wrong[] = {c};
  EXPECT_EQ(accel_prepare(g_acc, wrong, 1), ACCEL_ERR_WRONG_HANDLE);
  accel_config_free(c);
  // A loss that is not a scalar, and one with no autograd history.
  accel_tensor* two = f32({1, 2}, {2});
  EXPECT_EQ(accel_backward(g_acc, two), ACCEL_ERR_SHAPE);
  accel_tensor* one = f32({1}, {1});
  EXPECT_EQ(accel_backward(g_acc, one), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("does not require grad"),
            std::string::npos);
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "linear", &s));
  EXPECT_EQ(accel_scheduler_step(s), ACCEL_ERR_INVALID_ARGUMENT) << "total_steps is missing";
  EXPECT_EQ(accel_scheduler_new(o, "warmup", &s), ACCEL_ERR_INVALID_ARGUMENT);
  accel_scheduler_free(s);
  accel_tensor_free(two);
  accel_tensor_free(one);
  accel_optimizer_free(o);
  accel_model_free(m);
  accel_model_free(other);
}

TEST(Train, PreparedObjectsReportAFreedAccelerator) {
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=2 out_features=1"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  void* objs[] = {m, o};
  OK(accel_prepare(g_acc, objs, 2));
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  EXPECT_EQ(accel_optimizer_step(o), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("freed"), std::string::npos);
  accel_optimizer_free(o);
  accel_model_free(m);
  init_with({});
}
