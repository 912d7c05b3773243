// Empty initialisation (accel_model_new_empty, accel.hpp's accel::to_meta, Accelerate's
// init_empty_weights): models built without their weights, the state errors until a load fills
// them, loads that fill them in place with the checkpoint's values bitwise, tensors a not-strict
// load lacks initialised as their layer would, and a host module whose own forward sees the load.
#define ACCEL_WITH_TORCH
#include "accel/accel.hpp"

#include <gtest/gtest.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using accel::Tensor;

// A world of one. Without libaccel's tensor allocator (malloc_tuning), which would keep the
// memory of a model freed earlier in the test for the next one: the RSS then measures live memory.
accel::Accelerator make_accelerator() {
  for (const char* v : {"WORLD_SIZE", "RANK", "ACCEL_CONFIG_FILE", "ACCELERATE_MIXED_PRECISION",
                        "ACCELERATE_MALLOC_TUNING", "ACCEL_MALLOC_TUNING"})
    unsetenv(v);
  accel::Config config;
  config.set("malloc_tuning", "false");
  return accel::Accelerator(config);
}

std::string temp_dir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "empty_init_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// fc (linear 4 -> 3) and bn (batch_norm2d 3), or with `head` a linear 3 -> 2 besides.
accel::Model layers(accel::Model m, bool head = false) {
  m.add_layer("fc", "linear", "in_features=4 out_features=3");
  m.add_layer("bn", "batch_norm2d", "num_features=3");
  if (head) m.add_layer("head", "linear", "in_features=3 out_features=2");
  m.define("def forward(self, x):\n    return self.fc.forward(x)\n");
  return m;
}

// The status and message of a call expected to fail.
std::pair<accel_status, std::string> failure(accel_status s) {
  return {s, s == ACCEL_OK ? "" : accel_last_error_message()};
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const auto x = a.torch().contiguous(), y = b.torch().contiguous();
  return x.dtype() == y.dtype() && x.sizes() == y.sizes() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// A /proc/self/status field in MB; and the peak reset to the current size (Linux 4.0+).
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + key.size()) / 1024.0;
  return -1;
}
bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

TEST(EmptyInit, LayersAreBuiltWithoutWeightsAndEveryUseOfOneIsAStateError) {
  accel::Model m = layers(accel::Model::new_empty());
  EXPECT_EQ(m.parameter_element_count(), 4 * 3 + 3 + 3 + 3);
  EXPECT_EQ(m.tensor_names().size(), 7u);  // fc.weight, fc.bias, bn.weight, bn.bias + 3 buffers
  // Buffers stay on the CPU, initialised, unless include_buffers (Accelerate's semantics).
  EXPECT_EQ(m.tensor("bn.running_var").to_vector<float>(), (std::vector<float>{1, 1, 1}));

  accel_tensor* out = nullptr;
  auto [status, message] = failure(accel_model_tensor(m.get(), "fc.weight", &out));
  EXPECT_EQ(status, ACCEL_ERR_STATE);
  EXPECT_NE(message.find("'fc.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find("still empty"), std::string::npos) << message;
  EXPECT_NE(message.find("accel_load_pretrained"), std::string::npos) << message;

  Tensor x = Tensor::from_data<float>({1, 2, 3, 4}, {1, 4});
  const accel_tensor* in[] = {x.get()};
  accel_tensor_list* list = nullptr;
  std::tie(status, message) = failure(accel_model_call(m.get(), "forward", in, 1, &list));
  EXPECT_EQ(status, ACCEL_ERR_STATE);
  EXPECT_NE(message.find("'fc.weight' and 3 other tensor(s)"), std::string::npos) << message;

  const std::string ts = temp_dir("ts") + ".pt";
  EXPECT_EQ(accel_model_save_torchscript(m.get(), ts.c_str()), ACCEL_ERR_STATE);
  EXPECT_FALSE(std::filesystem::exists(ts));

  accel::Optimizer opt(m, "sgd");
  EXPECT_EQ(accel_optimizer_step(opt.get()), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("optimizer"), std::string::npos);

  auto acc = make_accelerator();
  const std::string dir = temp_dir("save");
  EXPECT_EQ(accel_save_model(acc.get(), m.get(), dir.c_str(), nullptr), ACCEL_ERR_STATE);
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  void* objects[] = {m.get()};
  EXPECT_EQ(accel_prepare(acc.get(), objects, 1), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("accel_prepare"), std::string::npos);
}

TEST(EmptyInit, IncludeBuffersLeavesTheBuffersEmptyToo) {
  accel::Model m = layers(accel::Model::new_empty(/*include_buffers=*/true));
  accel_tensor* out = nullptr;
  EXPECT_EQ(accel_model_tensor(m.get(), "bn.running_var", &out), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("'bn.running_var'"), std::string::npos);
}

TEST(EmptyInit, ALoadFillsEveryTensorWithTheCheckpointsValuesBitwise) {
  auto acc = make_accelerator();
  acc.set_seed(3);
  accel::Model source = layers(accel::Model());
  const std::string dir = temp_dir("full");
  acc.save_model(source, dir);

  for (const bool pretrained : {false, true}) {
    accel::Model m = layers(accel::Model::new_empty(/*include_buffers=*/true));
    if (pretrained)
      m.load_pretrained(dir, "strict=true");
    else
      m.load_checkpoint(dir);
    for (const auto& name : source.tensor_names())
      EXPECT_TRUE(same_bytes(m.tensor(name), source.tensor(name))) << name;
    Tensor x = Tensor::from_data<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
    EXPECT_TRUE(same_bytes(m.call("forward", {x})[0], source.call("forward", {x})[0]));
    // Filled in place: a parameter still trains (a leaf that requires grad).
    accel::Optimizer opt(m, "sgd");
    EXPECT_NO_THROW(opt.step());
  }
}

TEST(EmptyInit, AStrictLoadThatDoesNotMatchLeavesTheModelEmpty) {
  auto acc = make_accelerator();
  accel::Model source = layers(accel::Model());
  const std::string dir = temp_dir("strict");
  acc.save_model(source, dir);
  accel::Model m = layers(accel::Model::new_empty(), /*head=*/true);
  EXPECT_EQ(accel_load_checkpoint_in_model(m.get(), dir.c_str()), ACCEL_ERR_SHAPE);
  accel_tensor* out = nullptr;
  EXPECT_EQ(accel_model_tensor(m.get(), "fc.weight", &out), ACCEL_ERR_STATE);
}

TEST(EmptyInit, TensorsANotStrictLoadLacksGetTheirLayersInitialisation) {
  auto acc = make_accelerator();
  accel::Model source = layers(accel::Model());
  const std::string dir = temp_dir("head");
  acc.save_model(source, dir);
  accel::Model m = layers(accel::Model::new_empty(), /*head=*/true);
  torch::manual_seed(7);
  const auto report = m.load_pretrained(dir);
  EXPECT_EQ(report.missing, (std::vector<std::string>{"head.bias", "head.weight"}));
  EXPECT_TRUE(same_bytes(m.tensor("fc.weight"), source.tensor("fc.weight")));
  // torch.nn.Linear(3, 2)'s reset_parameters from the same random state, in registration order:
  // the load itself draws nothing.
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  auto w = torch::empty({2, 3});
  torch::nn::init::kaiming_uniform_(w, std::sqrt(5.0));
  auto b = torch::empty({2});
  torch::nn::init::uniform_(b, -1 / std::sqrt(3.0), 1 / std::sqrt(3.0));
  EXPECT_TRUE(same_bytes(m.tensor("head.weight"), Tensor(w)));
  EXPECT_TRUE(same_bytes(m.tensor("head.bias"), Tensor(b)));
  Tensor x = Tensor::from_data<float>({1, 2, 3, 4}, {1, 4});
  EXPECT_NO_THROW(m.call("forward", {x}));
  EXPECT_NO_THROW(acc.prepare(m));  // filled: nothing left empty
}

TEST(EmptyInit, ASizeIgnoredAsMismatchedGetsItsLayersInitialisation) {
  auto acc = make_accelerator();
  accel::Model source;
  source.add_layer("fc", "linear", "in_features=4 out_features=5");  // 5 outputs, not 3
  const std::string dir = temp_dir("mismatch");
  acc.save_model(source, dir);
  accel::Model m = layers(accel::Model::new_empty());
  EXPECT_EQ(accel_load_pretrained(m.get(), dir.c_str(), "", nullptr), ACCEL_ERR_SHAPE);
  const auto report = m.load_pretrained(dir, "ignore_mismatched_sizes=true");
  EXPECT_EQ(report.mismatched, (std::vector<std::string>{"fc.bias", "fc.weight"}));
  const auto w = m.tensor("fc.weight").to_vector<float>();  // kaiming_uniform(a=sqrt(5)): 1/2
  EXPECT_EQ(w.size(), 12u);
  for (float v : w) EXPECT_LE(std::abs(v), 0.5f);
  EXPECT_NE(w, std::vector<float>(12, 0.0f));
}

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

TEST(EmptyInitHost, AModuleEmptiedAndLentIsFilledInPlaceAndItsOwnForwardUsesTheLoad) {
  auto acc = make_accelerator();
  torch::manual_seed(1);
  auto trained = std::make_shared<Net>();
  const std::string dir = temp_dir("host");
  {
    accel::Model lent = accel::Model::from_module(*trained);
    acc.save_model(lent, dir);
  }
  torch::manual_seed(2);  // other weights, then dropped
  auto net = std::make_shared<Net>();
  accel::to_meta(*net);
  const auto* weight_impl = net->fc1->weight.unsafeGetTensorImpl();
  EXPECT_TRUE(net->fc1->weight.is_meta());
  EXPECT_TRUE(net->fc1->weight.requires_grad());
  accel::Model m = accel::Model::from_module(*net);

  accel_tensor* out = nullptr;
  EXPECT_EQ(accel_model_tensor(m.get(), "fc2.bias", &out), ACCEL_ERR_STATE);
  EXPECT_EQ(accel_model_forward_begin(m.get()), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("still empty"), std::string::npos);

  m.load_checkpoint(dir);
  // The module's own tensor objects hold the checkpoint's values.
  EXPECT_EQ(net->fc1->weight.unsafeGetTensorImpl(), weight_impl);
  EXPECT_FALSE(net->fc1->weight.is_meta());
  EXPECT_TRUE(net->fc1->weight.is_leaf());
  EXPECT_TRUE(net->fc1->weight.requires_grad());
  EXPECT_TRUE(torch::equal(net->fc1->weight, trained->fc1->weight));
  EXPECT_TRUE(torch::equal(net->fc2->bias, trained->fc2->bias));
  const auto x = torch::randn({5, 4});
  torch::Tensor y;
  {
    auto scope = m.forward_scope();
    y = net->forward(x);
  }
  EXPECT_TRUE(torch::equal(y, trained->forward(x)));
  y.sum().backward();  // gradients reach the filled leaves
  EXPECT_TRUE(net->fc1->weight.grad().defined());
}

TEST(EmptyInitHost, ATensorTheCheckpointLacksStaysEmptyUntilTheHostFillsIt) {
  auto acc = make_accelerator();
  auto trained = std::make_shared<Net>();
  const std::string dir = temp_dir("host_part");
  {
    accel::Model part;
    part.add_parameter("fc1.weight", Tensor(trained->fc1->weight));
    acc.save_model(part, dir);
  }
  auto net = std::make_shared<Net>();
  accel::to_meta(*net);
  accel::Model m = accel::Model::from_module(*net);
  const auto report = m.load_pretrained(dir);
  EXPECT_EQ(report.missing.size(), 3u);
  EXPECT_TRUE(torch::equal(net->fc1->weight, trained->fc1->weight));
  EXPECT_TRUE(net->fc2->weight.is_meta());
  EXPECT_EQ(accel_model_forward_begin(m.get()), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("accel::materialize"), std::string::npos);
  for (auto* t : {&net->fc1->bias, &net->fc2->weight, &net->fc2->bias})
    accel::materialize(*t, torch::zeros(t->sizes()));
  EXPECT_THROW(accel::materialize(net->fc2->bias, torch::zeros({2})), accel::Error);
  EXPECT_NO_THROW(m.forward_scope());
}

TEST(EmptyInitHost, AnEmptyTensorGoesWithTensorsOnAnyDevice) {
  accel::Model m;
  auto cpu = torch::zeros({2}).requires_grad_(true);
  auto meta = torch::empty({3}, torch::kMeta).requires_grad_(true);
  m.add_parameter("a", Tensor(cpu));
  EXPECT_NO_THROW(m.add_parameter("b", Tensor(meta)));
}

// Accelerate's test_init_empty_weights_very_large_model: 1000 x Linear(10000, 10000), 100
// billion parameters (400 GB in fp32), built empty in a few megabytes.
TEST(EmptyInitMemory, AHundredBillionParameterModelBuiltEmptyTakesUnder50MB) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator (its shadow memory, quarantine and redzones) makes "
                  "resident memory measure ASan, not the model";
#endif
  const double before = status_mb("VmRSS");
  accel::Model m = accel::Model::new_empty();
  for (int i = 0; i < 1000; ++i)
    m.add_layer("l" + std::to_string(i), "linear", "in_features=10000 out_features=10000");
  EXPECT_EQ(m.parameter_element_count(), int64_t{1000} * (10000 * 10000 + 10000));
  const double growth = status_mb("VmRSS") - before;
  EXPECT_LT(growth, 50.0);
  RecordProperty("rss_growth_mb", std::to_string(growth));
}

// A forward through 100 layers compiles in a moment: with one class name for every layer's type,
// LibTorch 1.13's alias analysis grew exponentially with them (28 layers: 12 GB).
TEST(EmptyInitMemory, AForwardThroughAHundredLayersCompilesInLittleMemory) {
  const double before = status_mb("VmRSS");
  accel::Model m = accel::Model::new_empty();
  std::string source = "def forward(self, x):\n";
  for (int i = 0; i < 100; ++i) {
    m.add_layer("l" + std::to_string(i), "linear", "in_features=10000 out_features=10000");
    source += "    x = self.l" + std::to_string(i) + ".forward(x)\n";
  }
  m.define(source + "    return x\n");
  EXPECT_LT(status_mb("VmRSS") - before, 100.0);
}

// A 200 MB model (two Linear(5000, 5000) and a bias each): built empty then loaded, the load's
// peak adds the model once (each tensor allocated once and read into); built as usual, the
// model's memory is all there before the load begins (its initial values, overwritten).
TEST(EmptyInitMemory, LoadingAnEmptyModelHoldsTheModelOnce) {
  auto acc = make_accelerator();
  auto build = [](accel::Model m) {
    for (const char* n : {"a", "b"}) m.add_layer(n, "linear", "in_features=5000 out_features=5000");
    return m;
  };
  const std::string dir = temp_dir("big");
  {
    accel::Model source = build(accel::Model());
    acc.save_model(source, dir);
  }
  const double model_mb = 2 * (5000.0 * 5000 + 5000) * 4 / (1024 * 1024);
  ASSERT_TRUE(reset_peak()) << "cannot reset the peak RSS (/proc/self/clear_refs)";
  const double before = status_mb("VmRSS");
  {
    accel::Model m = build(accel::Model::new_empty());
    const double built = status_mb("VmRSS") - before;
    m.load_checkpoint(dir);
    const double peak = status_mb("VmHWM") - before;
    EXPECT_LT(built, 64.0);
    EXPECT_LE(peak, model_mb + 64.0);
    EXPECT_GE(status_mb("VmRSS") - before, model_mb * 0.9);  // it is really loaded
    RecordProperty("empty_peak_growth_mb", std::to_string(peak));
    std::printf("model %.0f MB: empty build %.1f MB, load peak +%.0f MB\n", model_mb, built, peak);
  }
  ASSERT_TRUE(reset_peak());
  const double before_normal = status_mb("VmRSS");
  {
    accel::Model m = build(accel::Model());
    const double built = status_mb("VmRSS") - before_normal;
    m.load_checkpoint(dir);
    const double peak = status_mb("VmHWM") - before_normal;
    EXPECT_GE(built, model_mb * 0.9);  // the initial weights, before any byte is read
    RecordProperty("normal_built_mb", std::to_string(built));
    RecordProperty("normal_peak_growth_mb", std::to_string(peak));
    std::printf("model %.0f MB: normal build %.0f MB, load peak +%.0f MB\n", model_mb, built, peak);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
