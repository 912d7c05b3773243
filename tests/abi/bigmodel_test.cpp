// Big-model inference through the C ABI: accel_infer_device_map on catalogue models (full and
// empty) and its errors.
#include "accel/accel.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
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

}  // namespace
