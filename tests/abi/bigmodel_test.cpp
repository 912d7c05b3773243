// Big-model inference through the C ABI: accel_infer_device_map on catalogue models (full and
// empty) and its errors; accel_dispatch_model's disk offload against the model fully loaded.
#include "accel/accel.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/script.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

// The status and message of a call expected to fail.
std::pair<accel_status, std::string> failure(accel_status s) {
  return {s, s == ACCEL_OK ? "" : accel_last_error_message()};
}

// `layers` Linear(width, width) layers l0..l{layers-1}, called in a chain by forward.
accel_model* chain(int layers, int width, bool empty) {
  accel_model* m = nullptr;
  EXPECT_EQ(empty ? accel_model_new_empty(false, &m) : accel_model_new(&m), ACCEL_OK);
  const std::string spec =
      "in_features=" + std::to_string(width) + " out_features=" + std::to_string(width);
  std::string body = "def forward(self, x):\n";
  for (int i = 0; i < layers; ++i) {
    const std::string name = "l" + std::to_string(i);
    EXPECT_EQ(accel_model_add_layer(m, name.c_str(), "linear", spec.c_str()), ACCEL_OK);
    body += "    x = self." + name + ".forward(x)\n";
  }
  body += "    return x\n";
  EXPECT_EQ(accel_model_define(m, body.c_str()), ACCEL_OK);
  return m;
}

std::vector<std::string> lines(accel_bytes_list* list) {
  size_t n = 0;
  EXPECT_EQ(accel_bytes_list_count(list, &n), ACCEL_OK);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    const void* data = nullptr;
    size_t size = 0;
    EXPECT_EQ(accel_bytes_list_get(list, i, &data, &size), ACCEL_OK);
    out.emplace_back(static_cast<const char*>(data), size);
  }
  accel_bytes_list_free(list);
  return out;
}

std::vector<std::string> device_map(const accel_model* m, const char* options) {
  accel_bytes_list* list = nullptr;
  EXPECT_EQ(accel_infer_device_map(m, options, &list), ACCEL_OK) << accel_last_error_message();
  return list ? lines(list) : std::vector<std::string>{};
}

// 8 x Linear(64, 64): 16640 bytes a layer, 133120 in all.
constexpr int kLayerBytes = 64 * 64 * 4 + 64 * 4;

TEST(InferDeviceMap, ModelThatFitsIsOneCpuEntry) {
  accel_model* m = chain(8, 64, false);
  EXPECT_EQ(device_map(m, "max_memory=cpu:1GB,disk"), std::vector<std::string>{"=cpu"});
  accel_model_free(m);
}

// Accelerate keeps room on the cpu for the largest layer: 50000 - 16640 leaves two layers; the
// third is split into its tensors, neither fits, and everything after goes to disk.
TEST(InferDeviceMap, SplitsAtTheBudgetAsAccelerate) {
  for (bool empty : {false, true}) {
    accel_model* m = chain(8, 64, empty);
    const auto map = device_map(m, "max_memory=cpu:50000,disk, no_split_module_classes=Block");
    std::map<std::string, std::string> got;
    for (const auto& l : map) got[l.substr(0, l.find('='))] = l.substr(l.find('=') + 1);
    EXPECT_EQ(map.size(), 8u);
    EXPECT_EQ(map.at(0), "l0=cpu");
    EXPECT_EQ(map.at(1), "l1=cpu");
    for (int i = 2; i < 8; ++i) EXPECT_EQ(got["l" + std::to_string(i)], "disk") << i;
    accel_model_free(m);
  }
}

TEST(InferDeviceMap, NoDiskAndTooLittleCpuSaysNeededAndGiven) {
  accel_model* m = chain(8, 64, true);
  accel_bytes_list* list = nullptr;
  const auto [status, message] = failure(accel_infer_device_map(m, "max_memory=cpu:50000", &list));
  EXPECT_EQ(status, ACCEL_ERR_OUT_OF_MEMORY);
  EXPECT_NE(message.find("needs " + std::to_string(8 * kLayerBytes) + " bytes"), std::string::npos)
      << message;
  EXPECT_NE(message.find("cpu 50000 bytes and no disk"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(6 * kLayerBytes) + " bytes of modules (first 'l"),
            std::string::npos)
      << message;
  EXPECT_EQ(list, nullptr);
  // Enough cpu without disk is fine.
  EXPECT_EQ(device_map(m, "max_memory=cpu:1MB"), std::vector<std::string>{"=cpu"});
  accel_model_free(m);
}

TEST(InferDeviceMap, BadOptionsAreInvalidArguments) {
  accel_model* m = chain(2, 4, false);
  accel_bytes_list* list = nullptr;
  for (const char* bad : {"", "no_split_module_classes=Linear", "max_memory=0:1GB",
                          "max_memory=cpu:lots", "max_memory=cpu", "max_memory=disk color=red",
                          "max_memory=disk fallback_allocation=maybe", "max_memory"}) {
    const auto [status, message] = failure(accel_infer_device_map(m, bad, &list));
    EXPECT_EQ(status, ACCEL_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_FALSE(message.empty()) << bad;
  }
  EXPECT_EQ(list, nullptr);
  accel_model_free(m);
}

// Dispatch.

struct Stored {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Every tensor of `m` (all float32), by name.
std::map<std::string, Stored> tensors_of(const accel_model* m) {
  std::map<std::string, Stored> out;
  size_t count = 0;
  EXPECT_EQ(accel_model_tensor_count(m, &count), ACCEL_OK);
  for (size_t i = 0; i < count; ++i) {
    char name[256];
    size_t size = 0;
    EXPECT_EQ(accel_model_tensor_name(m, i, name, sizeof name, &size), ACCEL_OK);
    accel_tensor* t = nullptr;
    EXPECT_EQ(accel_model_tensor(m, name, &t), ACCEL_OK);
    Stored s;
    size_t dims = 0;
    accel_tensor_dim_count(t, &dims);
    s.shape.resize(dims);
    accel_tensor_shape(t, s.shape.data(), dims, &dims);
    int64_t n = 0;
    accel_tensor_element_count(t, &n);
    s.values.resize(static_cast<size_t>(n));
    EXPECT_EQ(accel_tensor_to_data(t, s.values.data(), s.values.size() * 4, &size), ACCEL_OK);
    accel_tensor_free(t);
    out[name] = s;
  }
  return out;
}

// A safetensors file of `tensors` (F32).
void write_safetensors(const std::string& path, const std::map<std::string, Stored>& tensors) {
  std::string header = "{";
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::string shape;
    for (auto d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const size_t bytes = t.values.size() * 4;
    header += (header.size() > 1 ? "," : "") + std::string("\"") + name +
              "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  for (const auto& [name, t] : tensors)
    f.write(reinterpret_cast<const char*>(t.values.data()),
            static_cast<std::streamsize>(t.values.size() * 4));
}

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "bigmodel_" + name + "_" + std::to_string(getpid()) +
         ".safetensors";
}

accel_tensor* input(int rows, int width, float scale) {
  std::vector<float> x(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < x.size(); ++i) x[i] = scale * static_cast<float>((i * 37) % 101) - 1.f;
  const int64_t shape[2] = {rows, width};
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_from_data(x.data(), x.size() * 4, ACCEL_DTYPE_F32, shape, 2, &t),
            ACCEL_OK);
  return t;
}

std::vector<float> call(accel_model* m, accel_tensor* x) {
  accel_tensor_list* out = nullptr;
  EXPECT_EQ(accel_model_call(m, "forward", &x, 1, &out), ACCEL_OK) << accel_last_error_message();
  if (!out) return {};
  accel_tensor* y = nullptr;
  accel_tensor_list_get(out, 0, &y);
  int64_t n = 0;
  accel_tensor_element_count(y, &n);
  std::vector<float> v(static_cast<size_t>(n));
  size_t size = 0;
  EXPECT_EQ(accel_tensor_to_data(y, v.data(), v.size() * 4, &size), ACCEL_OK);
  accel_tensor_free(y);
  accel_tensor_list_free(out);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// max_memory with a cpu budget of a quarter of 8 layers of `width`, and disk.
std::string quarter(int width) {
  const int64_t layer = int64_t{width} * width * 4 + int64_t{width} * 4;
  return "max_memory=cpu:" + std::to_string(2 * layer) + ",disk";
}

// Live anonymous memory: what glibc holds freed in its heap (a tensor freed by an earlier test,
// reused and freed again) is given back first.
long rss_anon_kb() {
  malloc_trim(0);
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}

// An empty model dispatched with a quarter of its size on the cpu computes what the model fully
// loaded computes, bit for bit, call after call; its offloaded tensors are refused by name.
TEST(DispatchModel, OutputsAreTheFullModelsBitwise) {
  accel_model* full = chain(8, 512, false);
  const std::string path = temp_file("full");
  const auto stored = tensors_of(full);
  write_safetensors(path, stored);
  accel_tensor* x = input(4, 512, 0.02f);
  const auto expected = call(full, x);

  accel_model* m = chain(8, 512, true);
  const auto map = device_map(m, quarter(512).c_str());
  EXPECT_EQ(map.at(0), "l0=cpu");
  EXPECT_EQ(map.size(), 8u);  // l1..l7 on disk
  ASSERT_EQ(accel_dispatch_model(m, path.c_str(), quarter(512).c_str()), ACCEL_OK)
      << accel_last_error_message();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(call(m, x), expected)) << i;
  // Each forward reads the offloaded weights from the file: changed there, the output changes.
  auto changed = stored;
  for (auto& v : changed["l7.weight"].values) v *= 2;
  write_safetensors(path, changed);
  EXPECT_FALSE(same_bits(call(m, x), expected));
  write_safetensors(path, stored);
  EXPECT_TRUE(same_bits(call(m, x), expected));

  accel_tensor* t = nullptr;
  ASSERT_EQ(accel_model_tensor(m, "l0.weight", &t), ACCEL_OK);  // loaded once
  accel_tensor_free(t);
  auto [status, message] = failure(accel_model_tensor(m, "l7.weight", &t));
  EXPECT_EQ(status, ACCEL_ERR_STATE);
  EXPECT_NE(message.find("'l7.weight' is offloaded to disk"), std::string::npos) << message;

  accel_optimizer* opt = nullptr;
  EXPECT_EQ(accel_optimizer_new(m, "sgd", &opt), ACCEL_ERR_STATE);
  // What needs every weight says that the model is dispatched.
  for (auto status_of :
       {+[](accel_model*d, const char*p) { return accel_load_checkpoint_in_model(d, p); },
        +[](accel_model*d, const char*p) { return accel_load_pretrained(d, p, nullptr, nullptr); },
        +[](accel_model*d, const char*) {
          return accel_model_save_torchscript(d, "/tmp/never.pt");
        }}) {
    std::tie(status, message) = failure(status_of(m, path.c_str()));
    EXPECT_EQ(status, ACCEL_ERR_STATE);
    EXPECT_NE(message.find("is offloaded to disk (accel_dispatch_model)"), std::string::npos)
        << message;
  }
  EXPECT_EQ(accel_dispatch_model(m, path.c_str(), quarter(512).c_str()), ACCEL_ERR_STATE);
  // Inference only: an input that requires grad would need the dropped weights in backward.
  ASSERT_EQ(accel_tensor_set_requires_grad(x, true), ACCEL_OK);
  accel_tensor_list* out = nullptr;
  std::tie(status, message) = failure(accel_model_call(m, "forward", &x, 1, &out));
  EXPECT_EQ(status, ACCEL_ERR_UNSUPPORTED) << message;
  EXPECT_NE(message.find("inference only"), std::string::npos) << message;
  ASSERT_EQ(accel_tensor_set_requires_grad(x, false), ACCEL_OK);
  EXPECT_TRUE(same_bits(call(m, x), expected));  // the failed call left nothing behind
  accel_tensor_free(x);
  accel_model_free(m);
  accel_model_free(full);
  std::remove(path.c_str());
}

// A loaded model dispatched gives back its offloaded tensors' memory: 7 of 8 layers of 4 MB go
// to disk, and a buffer of one layer comes.
TEST(DispatchModel, OffloadedTensorsHoldNoMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator (its shadow memory, quarantine and redzones) makes "
                  "resident memory measure ASan, not the model";
#endif
  accel_model* m = chain(8, 1024, false);
  const std::string path = temp_file("rss");
  write_safetensors(path, tensors_of(m));
  accel_tensor* x = input(2, 1024, 0.01f);
  const auto expected = call(m, x);
  const long before = rss_anon_kb();
  ASSERT_EQ(accel_dispatch_model(m, path.c_str(), quarter(1024).c_str()), ACCEL_OK)
      << accel_last_error_message();
  EXPECT_TRUE(same_bits(call(m, x), expected));
  const long after = rss_anon_kb();
  const long layer_kb = (1024 * 1024 * 4 + 1024 * 4) / 1024;
  std::printf("RssAnon %ld kB before dispatch, %ld kB after it and a forward (layer %ld kB)\n",
              before, after, layer_kb);
  EXPECT_GE(before - after, 5 * layer_kb) << before << " kB before, " << after << " kB after";
  accel_tensor_free(x);
  accel_model_free(m);
  std::remove(path.c_str());
}

TEST(DispatchModel, BadInputsLeaveTheModelUnchanged) {
  accel_model* m = chain(8, 64, false);
  const auto stored = tensors_of(m);
  accel_tensor* x = input(3, 64, 0.05f);
  const auto expected = call(m, x);
  const std::string opts = quarter(64);

  auto [status, message] =
      failure(accel_dispatch_model(m, "/nonexistent/model.safetensors", opts.c_str()));
  EXPECT_EQ(status, ACCEL_ERR_IO);
  EXPECT_NE(message.find("/nonexistent/model.safetensors"), std::string::npos) << message;

  auto other = stored;
  other["l5.weight"].shape = {32, 128};
  const std::string bad = temp_file("shape");
  write_safetensors(bad, other);
  std::tie(status, message) = failure(accel_dispatch_model(m, bad.c_str(), opts.c_str()));
  EXPECT_EQ(status, ACCEL_ERR_SHAPE);
  EXPECT_NE(message.find("'l5.weight'"), std::string::npos) << message;

  const std::string good = temp_file("good");
  write_safetensors(good, stored);
  std::tie(status, message) = failure(accel_dispatch_model(m, good.c_str(), "l0=cpu l1=disk"));
  EXPECT_EQ(status, ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("'l2.weight'"), std::string::npos) << message;
  std::tie(status, message) = failure(accel_dispatch_model(m, good.c_str(), "l0=gpu"));
  EXPECT_EQ(status, ACCEL_ERR_INVALID_ARGUMENT);

  // Unchanged: every tensor readable and equal, the same outputs, and a good dispatch still works.
  EXPECT_EQ(tensors_of(m).size(), stored.size());
  for (const auto& [name, t] : tensors_of(m))
    EXPECT_TRUE(same_bits(t.values, stored.at(name).values));
  EXPECT_TRUE(same_bits(call(m, x), expected));
  ASSERT_EQ(accel_dispatch_model(m, good.c_str(), "=cpu;l3=disk\nl6=disk"), ACCEL_OK)
      << accel_last_error_message();
  EXPECT_TRUE(same_bits(call(m, x), expected));
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_model_tensor(m, "l6.bias", &t), ACCEL_ERR_STATE);
  EXPECT_EQ(accel_model_tensor(m, "l5.bias", &t), ACCEL_OK);
  accel_tensor_free(t);
  accel_tensor_free(x);
  accel_model_free(m);
  for (const auto& p : {bad, good}) std::remove(p.c_str());
}

// A TorchScript archive is dispatched as a catalogue model; a method defined after dispatch gets
// the hooks before its first call.
TEST(DispatchModel, TorchScriptModelsAndMethodsDefinedLater) {
  accel_model* full = chain(8, 128, false);
  const std::string path = temp_file("ts"), archive = temp_file("ts") + ".pt";
  write_safetensors(path, tensors_of(full));
  ASSERT_EQ(accel_model_save_torchscript(full, archive.c_str()), ACCEL_OK);
  const char* head = "def head(self, x):\n    return self.l6.forward(self.l7.forward(x))\n";
  ASSERT_EQ(accel_model_define(full, head), ACCEL_OK);
  accel_tensor* x = input(2, 128, 0.03f);
  const auto expected = call(full, x);
  accel_tensor_list* out = nullptr;
  ASSERT_EQ(accel_model_call(full, "head", &x, 1, &out), ACCEL_OK);
  accel_tensor_list_free(out);

  accel_model* m = nullptr;
  ASSERT_EQ(accel_model_load_torchscript(archive.c_str(), &m), ACCEL_OK);
  ASSERT_EQ(accel_dispatch_model(m, path.c_str(), quarter(128).c_str()), ACCEL_OK)
      << accel_last_error_message();
  EXPECT_TRUE(same_bits(call(m, x), expected));
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_model_tensor(m, "l7.weight", &t), ACCEL_ERR_STATE);
  ASSERT_EQ(accel_model_define(m, head), ACCEL_OK);
  auto head_of = [&](accel_model* model) {
    accel_tensor_list* o = nullptr;
    EXPECT_EQ(accel_model_call(model, "head", &x, 1, &o), ACCEL_OK) << accel_last_error_message();
    accel_tensor* y = nullptr;
    accel_tensor_list_get(o, 0, &y);
    std::vector<float> v(2 * 128);
    size_t size = 0;
    EXPECT_EQ(accel_tensor_to_data(y, v.data(), v.size() * 4, &size), ACCEL_OK);
    accel_tensor_free(y);
    accel_tensor_list_free(o);
    return v;
  };
  EXPECT_TRUE(same_bits(head_of(m), head_of(full)));
  accel_tensor_free(x);
  accel_model_free(m);
  accel_model_free(full);
  for (const auto& p : {path, archive}) std::remove(p.c_str());
}

// Two blocks of two matrix modules each, in TorchScript (as a transformer's blocks of layers),
// saved as an archive.
void save_blocks(const std::string& path) {
  torch::manual_seed(3);
  torch::jit::Module root("Net");
  for (const char* b : {"blk0", "blk1"}) {
    torch::jit::Module block(std::string("Block_") + b);
    for (const char* m : {"a", "b"}) {
      torch::jit::Module inner(std::string("Mat_") + b + m);
      inner.register_parameter("w", torch::randn({16, 16}), false);
      inner.define("def forward(self, x):\n    return torch.mm(x, self.w)\n");
      block.register_module(m, inner);
    }
    block.define("def forward(self, x):\n    return self.b.forward(self.a.forward(x))\n");
    root.register_module(b, block);
  }
  root.define("def forward(self, x):\n    return self.blk1.forward(self.blk0.forward(x))\n");
  root.save(path);
}

// A block offloaded whole: its tensors are its children's; an offloaded module inside another
// offloaded one is refused, the model unchanged.
TEST(DispatchModel, NestedModulesOffloadWholeBlocks) {
  const std::string archive = temp_file("blocks") + ".pt", path = temp_file("blocks");
  save_blocks(archive);
  accel_model* full = nullptr;
  ASSERT_EQ(accel_model_load_torchscript(archive.c_str(), &full), ACCEL_OK);
  write_safetensors(path, tensors_of(full));
  accel_tensor* x = input(4, 16, 0.1f);
  const auto expected = call(full, x);

  accel_model* m = nullptr;
  ASSERT_EQ(accel_model_load_torchscript(archive.c_str(), &m), ACCEL_OK);
  auto [status, message] =
      failure(accel_dispatch_model(m, path.c_str(), "blk0=disk blk0.a=disk blk1=cpu"));
  EXPECT_EQ(status, ACCEL_ERR_UNSUPPORTED);
  EXPECT_NE(message.find("'blk0.a' is inside module 'blk0'"), std::string::npos) << message;
  EXPECT_TRUE(same_bits(call(m, x), expected));
  ASSERT_EQ(accel_dispatch_model(m, path.c_str(), "blk0=disk blk1=cpu"), ACCEL_OK)
      << accel_last_error_message();
  EXPECT_TRUE(same_bits(call(m, x), expected));
  accel_tensor* t = nullptr;
  std::tie(status, message) = failure(accel_model_tensor(m, "blk0.b.w", &t));
  EXPECT_EQ(status, ACCEL_ERR_STATE);
  EXPECT_NE(message.find("forward of 'blk0'"), std::string::npos) << message;
  EXPECT_EQ(accel_model_tensor(m, "blk1.b.w", &t), ACCEL_OK);
  accel_tensor_free(t);
  accel_tensor_free(x);
  accel_model_free(m);
  accel_model_free(full);
  for (const auto& p : {path, archive}) std::remove(p.c_str());
}

// No cpu at all: Accelerate maps the root to disk, and each top-level module is offloaded.
TEST(DispatchModel, EverythingOnDisk) {
  accel_model* full = chain(4, 32, false);
  const std::string path = temp_file("all_disk");
  write_safetensors(path, tensors_of(full));
  accel_tensor* x = input(2, 32, 0.1f);
  const auto expected = call(full, x);
  accel_model* m = chain(4, 32, true);
  EXPECT_EQ(device_map(m, "max_memory=cpu:0,disk"), std::vector<std::string>{"=disk"});
  ASSERT_EQ(accel_dispatch_model(m, path.c_str(), "max_memory=cpu:0,disk"), ACCEL_OK)
      << accel_last_error_message();
  EXPECT_TRUE(same_bits(call(m, x), expected));
  accel_tensor* t = nullptr;
  for (const char* name : {"l0.weight", "l3.bias"})
    EXPECT_EQ(accel_model_tensor(m, name, &t), ACCEL_ERR_STATE) << name;
  accel_tensor_free(x);
  accel_model_free(m);
  accel_model_free(full);
  std::remove(path.c_str());
}

}  // namespace
