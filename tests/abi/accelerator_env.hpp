// The accelerator every C-interface test binary shares: one per process (libaccel allows no more),
// made before the first test from a clean environment, replaceable by init_with().
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <utility>
#include <vector>

#include "accel/accel.h"

#define OK(call) ASSERT_EQ((call), ACCEL_OK) << #call << ": " << accel_last_error_message()

inline accel_accelerator* g_acc = nullptr;

// A tensor's elements, read as T (the caller knows the dtype).
template <class T>
std::vector<T> values_of(const accel_tensor* t) {
  size_t size = 0;
  EXPECT_EQ(accel_tensor_data_size(t, &size), ACCEL_OK) << accel_last_error_message();
  std::vector<T> v(size / sizeof(T));
  EXPECT_EQ(accel_tensor_to_data(t, v.data(), v.size() * sizeof(T), &size), ACCEL_OK)
      << accel_last_error_message();
  return v;
}

// Calls `method` once; its outputs, which the caller frees (empty when the call failed).
inline std::vector<accel_tensor*> call_method(accel_model* m, const char* method,
                                              std::vector<const accel_tensor*> inputs) {
  accel_tensor_list* list = nullptr;
  std::vector<accel_tensor*> out;
  const accel_status st = accel_model_call(m, method, inputs.data(), inputs.size(), &list);
  EXPECT_EQ(st, ACCEL_OK) << method << ": " << accel_last_error_message();
  if (st != ACCEL_OK) return out;
  size_t n = 0;
  EXPECT_EQ(accel_tensor_list_count(list, &n), ACCEL_OK);
  for (size_t i = 0; i < n; ++i) {
    accel_tensor* t = nullptr;
    EXPECT_EQ(accel_tensor_list_get(list, i, &t), ACCEL_OK);
    out.push_back(t);
  }
  accel_tensor_list_free(list);
  return out;
}

// The first output of `method` (its loss, say), which the caller frees.
inline accel_tensor* call_one(accel_model* m, const char* method,
                              std::vector<const accel_tensor*> inputs) {
  auto out = call_method(m, method, std::move(inputs));
  for (size_t i = 1; i < out.size(); ++i) accel_tensor_free(out[i]);
  return out.empty() ? nullptr : out[0];
}

// Replaces the process's accelerator by one made with `settings` (key, value).
inline void init_with(std::initializer_list<std::pair<const char*, const char*>> settings) {
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  for (const auto& [k, v] : settings)
    ASSERT_EQ(accel_config_set(c, k, v), ACCEL_OK) << accel_last_error_message();
  ASSERT_EQ(accel_init(c, &g_acc), ACCEL_OK) << accel_last_error_message();
  accel_config_free(c);
}

class AcceleratorEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    // A world of one, with nothing from the caller's environment deciding the settings.
    for (const char* v :
         {"WORLD_SIZE", "RANK", "ACCEL_CONFIG_FILE", "ACCELERATE_MIXED_PRECISION",
          "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "OMP_NUM_THREADS", "ACCEL_NUM_THREADS"})
      unsetenv(v);
    init_with({});
  }
  void TearDown() override { accel_accelerator_free(g_acc); }
};

inline ::testing::Environment* const g_accelerator_env =
    ::testing::AddGlobalTestEnvironment(new AcceleratorEnv);
