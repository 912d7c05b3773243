// Accelerate's own unit cases for the device-map helpers (tests/test_modeling_utils.py):
// compute_module_sizes, find_tied_parameters, clean_device_map. infer_auto_device_map itself is
// compared with Accelerate's code in accelerate_device_map_diff.py.
#include <gtest/gtest.h>

#include "bigmodel/device_map.hpp"
#include "common/error.hpp"

namespace accel::bigmodel {
namespace {

using Dict = std::map<std::string, std::string>;
Dict as_dict(const DeviceMap& m) {
  return Dict(m.begin(), m.end());
}

ModuleTree linear(int64_t in, int64_t out, int64_t& id) {
  ModuleTree m{"Linear", {{"weight", in * out * 4, id++}, {"bias", out * 4, id++}}, {}, {}};
  return m;
}

// Accelerate's ModelForTest: Linear(3, 4), BatchNorm1d(4), Linear(4, 5).
ModuleTree model_for_test(int64_t& id) {
  ModuleTree bn{"BatchNorm1d", {{"weight", 16, id++}, {"bias", 16, id++}}, {}, {}};
  bn.buffers = {
      {"running_mean", 16, id++}, {"running_var", 16, id++}, {"num_batches_tracked", 8, id++}};
  ModuleTree m{"ModelForTest", {}, {}, {}};
  m.children = {{"linear1", linear(3, 4, id)}, {"batchnorm", bn}, {"linear2", linear(4, 5, id)}};
  return m;
}

TEST(DeviceMap, ModuleSizesAsAccelerateComputesThem) {
  int64_t id = 0;
  const auto sizes = compute_module_sizes(model_for_test(id));
  EXPECT_EQ(sizes.at(""), 236);
  EXPECT_EQ(sizes.at("linear1"), 64);
  EXPECT_EQ(sizes.at("linear1.weight"), 48);
  EXPECT_EQ(sizes.at("batchnorm"), 72);
  EXPECT_EQ(sizes.at("linear2"), 100);
}

TEST(DeviceMap, TiedParametersCountOnceUnderTheirFirstName) {
  int64_t id = 0;
  ModuleTree m = model_for_test(id);
  m.children[2].second.params[0] = {"weight", 48, m.children[0].second.params[0].id};  // tied
  const auto sizes = compute_module_sizes(m);
  EXPECT_EQ(sizes.at("linear1"), 64);
  EXPECT_EQ(sizes.at("linear2"), 20);  // its weight is linear1's
  EXPECT_EQ(find_tied_parameters(m),
            (std::vector<std::vector<std::string>>{{"linear1.weight", "linear2.weight"}}));
}

TEST(DeviceMap, CleanDeviceMapMergesWhatSharesADevice) {
  DeviceMap a{{"a", "0"}, {"b", "0"}, {"c", "0"}};
  clean_device_map(a);
  EXPECT_EQ(a, (DeviceMap{{"", "0"}}));
  DeviceMap b{{"a.x", "0"}, {"a.y", "0"}, {"b.x", "1"}, {"b.y", "1"}, {"c", "1"}};
  clean_device_map(b);
  EXPECT_EQ(as_dict(b), (Dict{{"a", "0"}, {"b", "1"}, {"c", "1"}}));
  DeviceMap c{{"a.x", "0"},   {"a.y", "0"},   {"b.x.0", "1"}, {"b.x.1", "1"},
              {"b.y.0", "2"}, {"b.y.1", "2"}, {"c", "2"}};
  clean_device_map(c);
  EXPECT_EQ(as_dict(c), (Dict{{"a", "0"}, {"b.x", "1"}, {"b.y", "2"}, {"c", "2"}}));
}

TEST(DeviceMap, AccelerateFirstCaseAndBadDevices) {
  int64_t id = 0;
  DeviceMapOptions o;
  o.max_memory = {{"0", 200}, {"1", 200}};
  const auto map = infer_auto_device_map(model_for_test(id), o);
  EXPECT_EQ(as_dict(map), (Dict{{"linear1", "0"}, {"batchnorm", "1"}, {"linear2", "1"}}));
  o.max_memory = {{"tpu", 100}};
  EXPECT_THROW(infer_auto_device_map(model_for_test(id), o), accel::Error);
}

}  // namespace
}  // namespace accel::bigmodel
