// Models of the host's own tensors, through accel.hpp with LibTorch (a torch::nn::Module lent to
// libaccel) and through the C functions underneath: training in place, names and checkpoints,
// mixed precision in the host's forward, and every bad input the header names.
#define ACCEL_WITH_TORCH
#include "accel/accel.hpp"

#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>

namespace {

using accel::Tensor;

// A world of one, whatever the caller's environment says.
accel::Accelerator make_accelerator(const char* mixed_precision = "no") {
  for (const char* v : {"WORLD_SIZE", "RANK", "ACCEL_CONFIG_FILE", "ACCELERATE_MIXED_PRECISION",
                        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"})
    unsetenv(v);
  accel::Config config;
  config.set("mixed_precision", mixed_precision);
  return accel::Accelerator(config);
}

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    head = register_module("head", torch::nn::Sequential(torch::nn::Linear(8, 2)));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head->forward(torch::relu(bn->forward(fc1->forward(x))));
  }
  torch::nn::Linear fc1{nullptr};
  torch::nn::Sequential head{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

torch::Tensor inputs() {
  return torch::linspace(-1, 1, 32).reshape({8, 4});
}
torch::Tensor targets() {
  return torch::arange(8).remainder(2);
}

// Expects `call` to throw accel::Error with `status` and a message containing `text`.
template <class F>
void expect_error(F&& call, accel_status status, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected " << accel_status_name(status) << " with '" << text << "'";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

std::string temp_dir(const std::string& name) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// `steps` SGD steps of `net` through libaccel; the losses.
std::vector<double> train(accel::Accelerator& acc, accel::Model& model, accel::Optimizer& opt,
                          Net& net, int steps) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    acc.accumulate();
    torch::Tensor loss;
    {
      auto scope = model.forward_scope();
      loss = torch::cross_entropy_loss(net.forward(inputs()), targets());
    }
    acc.backward(loss);
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

TEST(HostModel, ModuleTensorsAreTrainedInPlaceAsPlainLibTorchWould) {
  torch::manual_seed(0);
  auto net = std::make_shared<Net>();
  auto reference = std::make_shared<Net>();
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : net->named_parameters())
      reference->named_parameters()[p.key()].copy_(p.value());
  }
  auto acc = make_accelerator();
  auto model = accel::Model::from_module(*net);
  accel::Optimizer opt(model, "sgd");
  opt.set("lr", "0.1").set("momentum", "0.9");
  acc.prepare(model, opt);
  const void* weight_data = net->fc1->weight.data_ptr();
  const auto losses = train(acc, model, opt, *net, 5);

  // The same five steps in plain LibTorch.
  std::vector<torch::Tensor> velocity;
  for (int i = 0; i < 5; ++i) {
    auto loss = torch::cross_entropy_loss(reference->forward(inputs()), targets());
    EXPECT_NEAR(loss.item<double>(), losses[static_cast<size_t>(i)], 1e-6) << "step " << i;
    loss.backward();
    torch::NoGradGuard no_grad;
    auto params = reference->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      if (velocity.size() <= k)
        velocity.push_back(params[k].grad().clone());
      else
        velocity[k].mul_(0.9).add_(params[k].grad());
      params[k].sub_(0.1 * velocity[k]);
      params[k].mutable_grad() = torch::Tensor();
    }
  }
  for (const auto& p : net->named_parameters())
    EXPECT_TRUE(torch::allclose(p.value(), reference->named_parameters()[p.key()], 1e-5, 1e-6))
        << p.key();
  // Batch-norm statistics are the module's own buffers, updated by its forward.
  EXPECT_TRUE(torch::allclose(net->bn->running_mean, reference->bn->running_mean, 1e-5, 1e-6));
  EXPECT_EQ(net->fc1->weight.data_ptr(), weight_data) << "stepped in place, not replaced";
  EXPECT_LT(losses.back(), losses.front());
}

TEST(HostModel, NamesAreTheModulesAndWeightsRoundTripByName) {
  torch::manual_seed(1);
  Net net;
  auto model = accel::Model::from_module(net);
  const std::vector<std::string> expected = {
      "fc1.weight", "fc1.bias",        "head.0.weight",  "head.0.bias",           "bn.weight",
      "bn.bias",    "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"};
  auto names = model.tensor_names();
  std::vector<std::string> sorted_names = names, sorted_expected = expected;
  std::sort(sorted_names.begin(), sorted_names.end());
  std::sort(sorted_expected.begin(), sorted_expected.end());
  EXPECT_EQ(sorted_names, sorted_expected);
  EXPECT_EQ(model.parameter_element_count(), 4 * 8 + 8 + 8 * 2 + 2 + 8 + 8);

  auto acc = make_accelerator();
  acc.prepare(model);
  const auto dir = temp_dir("host_weights");
  acc.save_model(model, dir);

  torch::manual_seed(2);
  Net other;
  ASSERT_FALSE(torch::equal(other.fc1->weight, net.fc1->weight));
  auto other_model = accel::Model::from_module(other);
  other_model.load_checkpoint(dir);
  for (const auto& p : net.named_parameters())
    EXPECT_TRUE(torch::equal(other.named_parameters()[p.key()], p.value())) << p.key();
  EXPECT_TRUE(torch::equal(other.bn->running_var, net.bn->running_var));
  std::filesystem::remove_all(dir);
}

TEST(HostModel, SaveStateAndLoadStateRestoreTheHostsTensorsAndOptimizer) {
  torch::manual_seed(3);
  Net net;
  auto acc = make_accelerator();
  auto model = accel::Model::from_module(net);
  accel::Optimizer opt(model, "adamw");
  opt.set("lr", "0.01");
  acc.prepare(model, opt);
  train(acc, model, opt, net, 2);
  const auto dir = temp_dir("host_state");
  acc.save_state(dir);
  const auto after = train(acc, model, opt, net, 3);
  const auto weight = net.head[0]->as<torch::nn::Linear>()->weight.clone();
  acc.load_state(dir);
  EXPECT_EQ(train(acc, model, opt, net, 3), after) << "the same three steps again, bit for bit";
  EXPECT_TRUE(torch::equal(net.head[0]->as<torch::nn::Linear>()->weight, weight));
  std::filesystem::remove_all(dir);
}

TEST(HostModel, BadTensorsAreRefusedByNameAndChangeNothing) {
  accel::Model model;
  auto w = torch::zeros({2, 2}, torch::requires_grad());
  model.add_parameter("fc.weight", w);
  expect_error([&] { model.add_parameter("x", Tensor(w * 2)); }, ACCEL_ERR_INVALID_ARGUMENT,
               "parameter 'x' is not an autograd leaf");
  expect_error([&] { model.add_parameter("x", Tensor(torch::zeros({2}))); },
               ACCEL_ERR_INVALID_ARGUMENT, "parameter 'x' does not require grad");
  expect_error([&] { model.add_parameter("x", Tensor(torch::zeros({2}, torch::kLong))); },
               ACCEL_ERR_INVALID_ARGUMENT, "a trained parameter is floating point");
  expect_error([&] { model.add_buffer("x", Tensor(torch::zeros({2}, torch::requires_grad()))); },
               ACCEL_ERR_INVALID_ARGUMENT, "buffer 'x' requires grad");
  // A tensor on another device is refused (a CUDA tensor beside CPU ones); a meta tensor is not
  // one: it is empty, for a load to fill (empty_init_test.cpp).
  expect_error([&] { model.add_parameter("fc.weight2", Tensor(w)); }, ACCEL_ERR_INVALID_ARGUMENT,
               "shares its storage with 'fc.weight' of this model");
  auto whole = torch::zeros({4}, torch::requires_grad());
  model.add_parameter("whole", whole);
  expect_error([&] { model.add_buffer("part", Tensor(whole.detach().narrow(0, 1, 2))); },
               ACCEL_ERR_INVALID_ARGUMENT, "shares its storage with 'whole'");
  accel::Model other;
  expect_error([&] { other.add_parameter("w", Tensor(w)); }, ACCEL_ERR_INVALID_ARGUMENT,
               "of another model: a tensor is lent to one model only");
  for (const char* bad : {"", "a..b", ".a", "a.", "a b", "fc-1.weight"})
    expect_error(
        [&] { model.add_parameter(bad, Tensor(torch::zeros({1}, torch::requires_grad()))); },
        ACCEL_ERR_INVALID_ARGUMENT, "tensor name '" + std::string(bad) + "'");
  expect_error(
      [&] { model.add_parameter("fc.weight", Tensor(torch::zeros({1}, torch::requires_grad()))); },
      ACCEL_ERR_INVALID_ARGUMENT, "already has 'fc.weight'");
  expect_error(
      [&] { model.add_parameter("whole.x", Tensor(torch::zeros({1}, torch::requires_grad()))); },
      ACCEL_ERR_INVALID_ARGUMENT, "'whole' is a tensor or attribute of the model");
  EXPECT_EQ(model.tensor_names(), (std::vector<std::string>{"fc.weight", "whole"}));
  EXPECT_EQ(other.tensor_names(), std::vector<std::string>{});
  // Once the first model is gone, its tensors may be lent again.
  model = accel::Model();
  other.add_parameter("w", Tensor(w));

  expect_error([&] { other.save_torchscript(temp_dir("host.pt")); }, ACCEL_ERR_STATE,
               "save its weights with accel_save_model");
  auto x = Tensor(torch::zeros({1, 2}));
  expect_error([&] { other.call("forward", {x}); }, ACCEL_ERR_INVALID_ARGUMENT,
               "its tensors are the host's, and so is its forward");
  auto acc = make_accelerator();
  acc.prepare(other);
  expect_error(
      [&] { other.add_parameter("late", Tensor(torch::zeros({1}, torch::requires_grad()))); },
      ACCEL_ERR_STATE, "cannot be added to a prepared model");
}

TEST(HostModel, MemoryTwoTensorsShareIsRefusedAndArchivesTakeNoHostTensors) {
  // Two tensors over one buffer, as from_blob makes them (tch-rs, gotch): different storages.
  std::vector<float> memory(6, 0.f);
  auto a = torch::from_blob(memory.data(), {4}).requires_grad_();
  auto b = torch::from_blob(memory.data() + 3, {3});
  accel::Model model;
  model.add_parameter("a", a);
  expect_error([&] { model.add_buffer("b", b); }, ACCEL_ERR_INVALID_ARGUMENT,
               "buffer 'b' shares its storage with 'a' of this model");
  accel::Model other;
  expect_error([&] { other.add_buffer("b", b); }, ACCEL_ERR_INVALID_ARGUMENT,
               "shares its storage with 'a' of another model");

  // An archive's submodules may share a class type: no host tensors there.
  accel::Model layers;
  layers.add_layer("fc", "linear", "in_features=2 out_features=1");
  const auto path = temp_dir("layers") + ".pt";
  layers.save_torchscript(path);
  auto loaded = accel::Model::load_torchscript(path);
  expect_error(
      [&] { loaded.add_parameter("fc.extra", Tensor(torch::zeros({1}, torch::requires_grad()))); },
      ACCEL_ERR_INVALID_ARGUMENT, "to a model loaded from a TorchScript archive");
  std::filesystem::remove(path);
}

TEST(HostModel, AFrozenParameterOfAModuleIsLentAsABuffer) {
  torch::manual_seed(4);
  Net net;
  net.fc1->weight.set_requires_grad(false);
  auto acc = make_accelerator();
  auto model = accel::Model::from_module(net);
  accel::Optimizer opt(model, "sgd");
  opt.set("lr", "0.1");
  acc.prepare(model, opt);
  const auto frozen = net.fc1->weight.clone();
  // (fc1's bias feeds batch norm, which cancels its gradient: the head's bias shows the steps.)
  const auto bias = net.head[0]->as<torch::nn::Linear>()->bias.clone();
  train(acc, model, opt, net, 2);
  EXPECT_TRUE(torch::equal(net.fc1->weight, frozen)) << "never stepped";
  EXPECT_FALSE(torch::equal(net.head[0]->as<torch::nn::Linear>()->bias, bias)) << "trained";
  const auto names = model.tensor_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "fc1.weight"), names.end());
  EXPECT_EQ(model.parameter_element_count(), 74 - 32);
}

TEST(HostModel, ResizingOrReplacingAPreparedTensorIsNamedAtTheNextStep) {
  auto acc = make_accelerator();
  auto w = torch::ones({3}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  accel::Model model;
  model.add_parameter("w", w).add_parameter("b", b);
  accel::Optimizer opt(model, "sgd");
  acc.prepare(model, opt);
  auto loss = [&] { return (w.sum() + b.sum()) * 2; };
  acc.backward(loss());
  opt.step();
  // As Python's `p.data = ...`: the same tensor object, another shape or storage.
  const torch::Tensor w_data = w.data();
  w.set_data(torch::zeros({5}));
  expect_error([&] { acc.backward(loss()); }, ACCEL_ERR_STATE,
               "the host changed 'w' while its model is prepared (resized from [3] to [5])");
  w.set_data(w_data);
  b.set_data(torch::zeros({1}));
  expect_error([&] { opt.step(); }, ACCEL_ERR_STATE,
               "'b' while its model is prepared (its storage was replaced)");
}

TEST(HostModel, TheHostMayDropItsHandlesTheModelKeepsTheTensors) {
  auto acc = make_accelerator();
  accel_model* model = nullptr;
  torch::Tensor host;  // the host's own reference, taken before its handle is freed
  ASSERT_EQ(accel_model_new(&model), ACCEL_OK);
  {
    // Made from data, as a C host does: requires_grad set through the C interface.
    const float values[] = {1, 2, 3};
    const int64_t shape[] = {3};
    accel_tensor* t = nullptr;
    ASSERT_EQ(accel_tensor_from_data(values, sizeof values, ACCEL_DTYPE_F32, shape, 1, &t),
              ACCEL_OK);
    EXPECT_EQ(accel_model_add_parameter(model, "w", t), ACCEL_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(accel_tensor_set_requires_grad(t, true), ACCEL_OK) << accel_last_error_message();
    ASSERT_EQ(accel_model_add_parameter(model, "w", t), ACCEL_OK) << accel_last_error_message();
    void* borrowed = nullptr;
    ASSERT_EQ(accel_tensor_borrow_torch(t, &borrowed), ACCEL_OK);
    host = *static_cast<torch::Tensor*>(borrowed);
    accel_tensor_free(t);  // the host's handle is gone; the model keeps the tensor
  }
  accel_optimizer* opt = nullptr;
  ASSERT_EQ(accel_optimizer_new(model, "sgd", &opt), ACCEL_OK);
  ASSERT_EQ(accel_optimizer_set(opt, "lr", "0.5"), ACCEL_OK);
  void* objects[] = {model, opt};
  ASSERT_EQ(accel_prepare(acc.get(), objects, 2), ACCEL_OK) << accel_last_error_message();
  // The host's forward, on its own reference: loss = sum(w^2), so one step of lr 0.5 zeroes w.
  accel_tensor* loss = nullptr;
  {
    accel_tensor* copy = nullptr;
    ASSERT_EQ(accel_model_tensor(model, "w", &copy), ACCEL_OK);
    EXPECT_EQ(Tensor(copy).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  }
  torch::Tensor l = (host * host).sum();
  ASSERT_EQ(accel_tensor_wrap_torch(&l, &loss), ACCEL_OK);
  ASSERT_EQ(accel_backward(acc.get(), loss), ACCEL_OK) << accel_last_error_message();
  ASSERT_EQ(accel_optimizer_step(opt), ACCEL_OK) << accel_last_error_message();
  accel_tensor_free(loss);
  EXPECT_TRUE(torch::equal(host, torch::zeros({3}))) << host;
  accel_optimizer_free(opt);
  accel_model_free(model);
  EXPECT_TRUE(torch::equal(host, torch::zeros({3}))) << "the host's reference outlives the model";
}

TEST(HostModel, ForwardScopeRunsTheHostsForwardUnderTheAcceleratorsAutocast) {
  std::optional<accel::Accelerator> acc(make_accelerator("bf16"));
  auto w = torch::randn({4, 4}, torch::requires_grad());
  accel::Model model;
  model.add_parameter("w", w);
  acc->prepare(model);
  const auto x = torch::randn({2, 4});
  {
    auto scope = model.forward_scope();
    EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kBFloat16) << "autocast is on inside";
  }
  EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kFloat) << "and off after";
  expect_error([&] { accel::detail::check(accel_model_forward_end(model.get())); }, ACCEL_ERR_STATE,
               "without accel_model_forward_begin on this thread");
  accel::Model second;
  second.add_parameter("v", Tensor(torch::zeros({1}, torch::requires_grad())));
  acc->prepare(second);
  accel::detail::check(accel_model_forward_begin(model.get()));
  accel::detail::check(accel_model_forward_begin(second.get()));
  expect_error([&] { accel::detail::check(accel_model_forward_end(model.get())); }, ACCEL_ERR_STATE,
               "end them in reverse order");
  accel::detail::check(accel_model_forward_end(second.get()));
  accel::detail::check(accel_model_forward_end(model.get()));
  EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kFloat);

  // A forward still open when its accelerator goes closes all the same.
  accel::detail::check(accel_model_forward_begin(model.get()));
  acc.reset();
  EXPECT_EQ(accel_model_forward_end(model.get()), ACCEL_OK) << accel_last_error_message();
  EXPECT_EQ(torch::mm(x, w).scalar_type(), torch::kFloat) << "autocast is off again";
}

TEST(HostModel, AnotherLibTorchBuildIsRefusedNamingBoth) {
  EXPECT_NO_THROW(accel::check_torch());
  EXPECT_EQ(accel_torch_check("0.1.0", -1, nullptr), ACCEL_ERR_UNSUPPORTED);
  const std::string message = accel_last_error_message();
  EXPECT_NE(message.find("built against LibTorch 0.1.0"), std::string::npos) << message;
  EXPECT_NE(message.find(std::string("libaccel runs on LibTorch ") + TORCH_VERSION),
            std::string::npos)
      << message;
  EXPECT_EQ(accel_torch_check(TORCH_VERSION, 1 - _GLIBCXX_USE_CXX11_ABI, nullptr),
            ACCEL_ERR_UNSUPPORTED);
  // The right version, but another copy of the library: named by file.
  EXPECT_EQ(accel_torch_check(TORCH_VERSION, -1, reinterpret_cast<const void*>(&accel_version)),
            ACCEL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(accel_last_error_message()).find("libaccel.so"), std::string::npos)
      << accel_last_error_message();
}

}  // namespace

// The C++ API's text data: a ragged dataset and a stream from std::function, an exception from a
// callback reported by next(), split_between_processes and the trigger in a world of one.
TEST(CppApi, RaggedDatasetsStreamsSplitAndTrigger) {
  accel::Accelerator acc = make_accelerator();
  const std::vector<int64_t> lengths = {2, 0, 3};
  auto ragged = accel::Dataset::from_ragged(
      3, {accel::Field::ragged(ACCEL_DTYPE_I64)},
      [&](int64_t i, int64_t* out) { out[0] = lengths[static_cast<size_t>(i)]; },
      [&](int64_t i, void* const* buffers, const size_t* sizes) {
        if (i == 1 && sizes[0] != 0) throw std::runtime_error("sizes disagree");
        auto* tokens = static_cast<int64_t*>(buffers[0]);
        for (size_t j = 0; j < sizes[0] / 8; ++j) tokens[j] = 10 * i + static_cast<int64_t>(j);
      });
  accel::DataLoader dl(acc, ragged);
  dl.set("batch_size", "3").set_field(0, "pad_value", "-1");
  auto batch = dl.next();
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0].to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, -1, -1, -1, -1, 20, 21, 22}));
  EXPECT_EQ((*batch)[1].to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 0, 0, 0, 1, 1, 1}));

  int64_t failing_at = 2;
  auto stream =
      accel::Dataset::from_stream({accel::Field{ACCEL_DTYPE_I64, {}}},
                                  [&](int64_t, int64_t position) -> std::optional<accel::Sample> {
                                    if (position == failing_at)
                                      throw std::runtime_error("the source went away");
                                    if (position >= 4) return std::nullopt;
                                    return accel::Sample().set(0, position);
                                  });
  EXPECT_EQ(stream.sample_count(), -1);
  accel::DataLoader sl(acc, stream);
  sl.set("batch_size", "2");
  EXPECT_EQ(sl.next()->at(0).to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  try {
    sl.next();
    FAIL() << "the stream's exception was not reported";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_CALLBACK);
    EXPECT_NE(std::string(e.what()).find("the source went away"), std::string::npos) << e.what();
  }
  failing_at = -1;
  EXPECT_EQ(sl.next()->at(0).to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));

  EXPECT_EQ(acc.split_between_processes(std::vector<std::string>{"a", "b"}, true),
            (std::vector<std::string>{"a", "b"}));
  // A dictionary splits every value alike; values of different lengths are refused.
  const std::map<std::string, std::vector<int>> prompts{{"id", {1, 2}}, {"len", {5, 6}}};
  EXPECT_EQ(acc.split_between_processes(prompts, true), prompts);
  std::map<std::string, accel::Tensor> columns;
  columns.emplace("x", accel::Tensor::from_data<int64_t>({1, 2, 3}, {3}));
  EXPECT_EQ(acc.split_between_processes(columns).at("x").to_vector<int64_t>(),
            (std::vector<int64_t>{1, 2, 3}));
  try {
    acc.split_between_processes(std::map<std::string, std::vector<int>>{{"a", {1}}, {"b", {1, 2}}});
    ADD_FAILURE() << "values of different lengths were split";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("same length"), std::string::npos) << e.what();
  }
  // set_seed seeds the C++ generator too: the same draws as a std::mt19937_64 of that seed.
  acc.set_seed(1234);
  EXPECT_EQ(acc.rng()(), std::mt19937_64(1234)());
  acc.set_seed(1234, true);  // process 0: the same seed
  EXPECT_EQ(acc.rng()(), std::mt19937_64(1234)());
  EXPECT_FALSE(acc.check_trigger());
  acc.set_trigger();
  EXPECT_TRUE(acc.check_trigger());

  // join_uneven_inputs passes the loop's value and exception through, ending the join either way.
  EXPECT_EQ(acc.join_uneven_inputs([] { return 7; }, 0), 7);
  EXPECT_THROW(acc.join_uneven_inputs([]() -> int { throw std::runtime_error("loop"); }),
               std::runtime_error);
  acc.join_uneven_inputs([&] {
    try {
      acc.join_uneven_inputs([] {});
      ADD_FAILURE() << "a join inside a join was accepted";
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.status(), ACCEL_ERR_STATE);
    }
  });
}

TEST(CppApi, TrackersValuesAndACustomTrackerWhoseExceptionIsReported) {
  const std::string dir = ::testing::TempDir() + "cpp_trackers";
  std::filesystem::remove_all(dir);
  accel::Config config;
  config.set("log_with", "jsonl").set("logging_dir", dir);
  accel::Accelerator acc(config);
  struct Calls : accel::Tracker {
    std::vector<std::string>* seen;
    explicit Calls(std::vector<std::string>* s) : seen(s) {}
    void start(const std::string& project, const std::vector<accel::Values::Entry>& c) override {
      seen->push_back("start " + project + " " + c.at(0).key);
    }
    void log(const std::vector<accel::Values::Entry>& v, int64_t step) override {
      if (step == 2) throw std::runtime_error("the database is down");
      seen->push_back("log " + std::to_string(step) + " " + v.at(1).text);
    }
    void finish() override { seen->push_back("finish"); }
  };
  std::vector<std::string> seen;
  acc.add_tracker("db", std::make_unique<Calls>(&seen));
  accel::Values hparams{{"lr", 0.01}};
  acc.init_trackers("run", &hparams);
  accel::Values v{{"loss", 0.5}};
  v.set("note", "ok");
  EXPECT_EQ(v.size(), 2u);
  EXPECT_EQ(v.entries().at(1).text, "ok");
  acc.log(v, 1);
  try {
    acc.log(v, 2);
    ADD_FAILURE() << "the tracker's exception was lost";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_CALLBACK);
    EXPECT_NE(std::string(e.what()).find("tracker 'db'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the database is down"), std::string::npos) << e.what();
  }
  acc.end_training();
  EXPECT_EQ(seen, (std::vector<std::string>{"start run lr", "log 1 ok", "finish"}));
  std::ifstream jsonl(dir + "/run/metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(jsonl, l);) ++lines;
  EXPECT_EQ(lines, 2);  // the file got step 2 as well
}

TEST(CppApi, LoggerLevelsOptionsAndASinkWhoseExceptionIsReported) {
  accel::Accelerator acc;
  EXPECT_EQ(acc.log_level(), ACCEL_LOG_INFO);
  std::vector<std::string> seen;
  acc.set_log_sink(
      [&](accel_log_level level, int32_t rank, accel_log_flags flags, const std::string& message) {
        if (message == "refuse") throw std::runtime_error("the log server is down");
        seen.push_back(std::to_string(level) + " " + std::to_string(rank) + " " +
                       std::to_string(flags) + " " + message);
      });
  acc.info("hello");
  acc.debug("dropped");
  acc.warning("every rank", {false, false});
  acc.error("in order", {false, true});
  acc.set_log_level(ACCEL_LOG_DEBUG);
  acc.debug("kept");
  EXPECT_EQ(seen, (std::vector<std::string>{"20 0 0 hello", "30 0 1 every rank", "40 0 3 in order",
                                            "10 0 0 kept"}));
  try {
    acc.critical("refuse");
    ADD_FAILURE() << "the sink's exception was lost";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_CALLBACK);
    EXPECT_NE(std::string(e.what()).find("the log server is down"), std::string::npos) << e.what();
  }
  acc.set_log_sink(nullptr);
  ::testing::internal::CaptureStderr();
  acc.info("plain");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "INFO: plain\n");
}

TEST(CppApi, AWarningOfTheLibraryReachesTheProgramsSinkAtItsLevel) {
  const std::string dir = ::testing::TempDir() + "cpp_torn";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/run");
  // A record cut by a killed run: the next run moves it aside and the core says so.
  std::ofstream(dir + "/run/metrics.jsonl")
      << "{\"step\": 1, \"wall_time\": 1, \"values\": {}}\n{\"st";
  accel::Config config;
  config.set("log_with", "jsonl").set("logging_dir", dir);
  accel::Accelerator acc(config);
  std::vector<std::pair<accel_log_level, std::string>> seen;
  acc.set_log_sink([&](accel_log_level level, int32_t, accel_log_flags, const std::string& m) {
    seen.emplace_back(level, m);
  });
  acc.init_trackers("run");
  acc.end_training();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, ACCEL_LOG_WARNING);
  EXPECT_NE(seen[0].second.find("moved to " + dir + "/run/metrics.jsonl.torn-1"), std::string::npos)
      << seen[0].second;
  // Above the warning's level, the sink hears nothing of the next repair.
  std::ofstream(dir + "/run/metrics.jsonl", std::ios::app) << "{\"st";
  acc.set_log_level(ACCEL_LOG_ERROR);
  acc.init_trackers("run");
  acc.end_training();
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/metrics.jsonl.torn-2"));
}

// LibTorch's own types go straight in (issue 53): a module holder or a shared_ptr (the model
// keeps the module alive), torch::Tensor wherever accel.hpp takes tensors, and the device as a
// torch::Device.
TEST(HostModel, LibTorchTypesGoStraightIn) {
  accel::Accelerator acc = make_accelerator();
  EXPECT_EQ(acc.torch_device(), torch::Device(torch::kCPU));
  torch::nn::Linear holder(4, 2);
  const accel::Model from_holder = accel::Model::from_module(holder);
  EXPECT_EQ(from_holder.tensor_names(), (std::vector<std::string>{"weight", "bias"}));
  std::weak_ptr<torch::nn::LinearImpl> watched;
  std::optional<accel::Model> kept;
  {
    auto module = std::make_shared<torch::nn::LinearImpl>(4, 2);
    watched = module;
    kept.emplace(accel::Model::from_module(module));
  }
  EXPECT_FALSE(watched.expired()) << "the model keeps a shared module alive";
  kept.reset();
  EXPECT_TRUE(watched.expired());
  EXPECT_THROW(accel::Model::from_module(std::shared_ptr<torch::nn::Module>()), accel::Error);

  const torch::Tensor x = torch::arange(12, torch::kFloat).reshape({3, 4});
  accel::Dataset data = accel::Dataset::from_tensors({x, torch::arange(3)});
  accel::DataLoader loader(acc, data);
  loader.set("batch_size", "3");
  EXPECT_TRUE(torch::equal((*loader.next())[0].torch(), x));
  accel::Model scripted;
  scripted.define("def double(self, x):\n    return x * 2\n");
  EXPECT_TRUE(torch::equal(scripted.call("double", {x})[0].torch(), x * 2));
}

namespace {

// torch::optim's key of a parameter's state: 1.13's the text of its TensorImpl's address (as
// c10::guts::to_string writes it), 2.x's the address.
template <class Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// A LibTorch optimizer of the program's own class, keeping a per-parameter count as its state.
struct CountingState : torch::optim::OptimizerCloneableParamState<CountingState> {
  int64_t steps = 0;
};
struct CountingSgd : torch::optim::Optimizer {
  explicit CountingSgd(std::vector<torch::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<torch::optim::SGDOptions>(0.1)) {}
  torch::Tensor step(LossClosure) override {
    torch::NoGradGuard no_grad;
    for (auto& p : param_groups_[0].params()) {
      if (!p.grad().defined()) continue;
      p.sub_(0.1 * p.grad());
      auto& s = state_[state_key<std::decay_t<decltype(state_)>::key_type>(p)];
      if (!s) s = std::make_unique<CountingState>();
      static_cast<CountingState&>(*s).steps++;
    }
    return {};
  }
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}
};

}  // namespace

// The program's own torch::optim optimizer (issue 53), stepped as it is: five momentum SGD steps
// through libaccel are bitwise those of libaccel's own sgd (and LibTorch's own loop's within the
// float noise of another thread count); a schedule drives its rate; save_state and
// load_state carry its state (a LibTorch class) so that a resumed run is bitwise the whole one; an
// optimizer over other tensors is refused by name, one of a class of the program's own steps but
// is not checkpointed.
TEST(HostModel, TheProgramsOwnTorchOptimizerIsSteppedAsItIs) {
  auto run = [](int steps, const std::string& save, const std::string& load, bool own = true) {
    torch::manual_seed(3);
    auto net = std::make_shared<Net>();
    auto acc = make_accelerator();
    auto model = accel::Model::from_module(net);
    accel::SGDOptions libaccels;
    libaccels.lr = 0.1;
    libaccels.momentum = 0.9;
    accel::Optimizer opt =
        own ? accel::Optimizer(model,
                               std::make_shared<torch::optim::SGD>(
                                   net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)))
            : accel::Optimizer(model, libaccels);
    acc.prepare(model, opt);
    if (!load.empty()) acc.load_state(load);
    train(acc, model, opt, *net, steps);
    if (!save.empty()) acc.save_state(save);
    return net;
  };
  torch::manual_seed(3);
  auto reference = std::make_shared<Net>();
  torch::optim::SGD plain(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int i = 0; i < 5; ++i) {
    torch::cross_entropy_loss(reference->forward(inputs()), targets()).backward();
    plain.step();
    plain.zero_grad();
  }
  const auto whole = run(5, "", ""), libaccels = run(5, "", "", false);
  for (const auto& p : whole->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), libaccels->named_parameters()[p.key()])) << p.key();
    // libaccel runs LibTorch on its own thread count: sums in another order.
    EXPECT_TRUE(torch::allclose(p.value(), reference->named_parameters()[p.key()], 1e-5, 1e-6))
        << p.key();
  }

  const std::string dir = temp_dir("foreign_optimizer");
  run(2, dir, "");
  const auto resumed = run(3, "", dir);
  for (const auto& p : whole->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), resumed->named_parameters()[p.key()])) << p.key();

  {
    auto net = std::make_shared<Net>();
    auto acc = make_accelerator();
    auto model = accel::Model::from_module(net);
    auto program =
        std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
    accel::Optimizer opt(model, program);
    expect_error([&] { opt.add_group({"fc1.weight"}); }, ACCEL_ERR_STATE, "groups already");
    accel::LinearSchedule linear;
    linear.total_steps = 4;
    accel::Scheduler sched(opt, linear);
    acc.prepare(model, opt, sched);
    train(acc, model, opt, *net, 1);
    sched.step();
    EXPECT_DOUBLE_EQ(program->param_groups()[0].options().get_lr(), 0.01 * 3 / 4);
    expect_error([&] { opt.set("momentum", "0.9"); }, ACCEL_ERR_INVALID_ARGUMENT, "known: lr");
  }
  {
    auto net = std::make_shared<Net>(), other = std::make_shared<Net>();
    auto acc = make_accelerator();
    auto model = accel::Model::from_module(net);
    accel::Optimizer opt(model, std::make_shared<torch::optim::SGD>(other->parameters(),
                                                                    torch::optim::SGDOptions(0.1)));
    expect_error([&] { acc.prepare(model, opt); }, ACCEL_ERR_INVALID_ARGUMENT,
                 "is not one the program's optimizer steps");
  }
  {
    auto net = std::make_shared<Net>();
    auto acc = make_accelerator();
    auto model = accel::Model::from_module(net);
    accel::Optimizer opt(model, std::make_shared<CountingSgd>(net->parameters()));
    acc.prepare(model, opt);
    const auto before = net->fc1->weight.clone();
    train(acc, model, opt, *net, 1);
    EXPECT_FALSE(torch::equal(before, net->fc1->weight)) << "stepped";
    expect_error([&] { acc.save_state(temp_dir("foreign_custom")); }, ACCEL_ERR_UNSUPPORTED,
                 "cannot be checkpointed");
  }
  std::filesystem::remove_all(dir);
}
