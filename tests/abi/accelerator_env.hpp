// The accelerator every C-interface test binary shares: one per process (libaccel allows no more),
// made before the first test from a clean environment, replaceable by init_with().
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "accel/accel.h"

#define OK(call) ASSERT_EQ((call), ACCEL_OK) << #call << ": " << accel_last_error_message()

inline accel_accelerator* g_acc = nullptr;

// Replaces the process's accelerator by one made with `settings` (key, value).
inline void init_with(std::initializer_list<std::pair<const char*, const char*>> settings) {
  accel_free(g_acc);
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
  void TearDown() override { accel_free(g_acc); }
};

inline ::testing::Environment* const g_accelerator_env =
    ::testing::AddGlobalTestEnvironment(new AcceleratorEnv);
