// The process's place from the torchrun-compatible environment.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "runtime/process_place.hpp"

using accel::runtime::default_thread_count;
using accel::runtime::read_process_place;

TEST(ProcessPlace, AloneIsAWorldOfOne) {
  const auto p = read_process_place({});
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.rank, 0);
  EXPECT_FALSE(p.distributed());
}

TEST(ProcessPlace, ReadsTorchrunVariables) {
  const auto p = read_process_place({{"RANK", "3"},
                                     {"WORLD_SIZE", "4"},
                                     {"LOCAL_RANK", "1"},
                                     {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "10.1.2.3"},
                                     {"MASTER_PORT", "1234"},
                                     {"TORCHELASTIC_RUN_ID", "job7"}});
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 2);
  EXPECT_EQ(p.master_addr, "10.1.2.3");
  EXPECT_EQ(p.master_port, 1234);
  EXPECT_EQ(p.run_id, "job7");
  EXPECT_FALSE(p.store_hosted);
}

TEST(ProcessPlace, LauncherVariables) {
  const auto p = read_process_place({{"RANK", "1"},
                                     {"WORLD_SIZE", "2"},
                                     {"ACCEL_STORE_HOSTED", "1"},
                                     {"ACCEL_RUN_ID", "abc"},
                                     {"TORCHELASTIC_RUN_ID", "other"}});
  EXPECT_TRUE(p.store_hosted);
  EXPECT_EQ(p.run_id, "abc");
  EXPECT_EQ(p.local_rank, 1) << "single machine: LOCAL_RANK defaults to RANK";
  EXPECT_EQ(p.master_port, 29500);
}

TEST(ProcessPlace, BadValuesNameTheVariable) {
  auto expect_bad = [](accel::config::EnvMap env, const std::string& var) {
    try {
      read_process_place(env);
      ADD_FAILURE() << "accepted " << var;
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.code(), accel::Errc::config);
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
    }
  };
  expect_bad({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK");
  expect_bad({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK");
  expect_bad({{"WORLD_SIZE", "0"}}, "WORLD_SIZE");
  expect_bad({{"WORLD_SIZE", "2"}}, "RANK");
  expect_bad({{"RANK", "0"}}, "WORLD_SIZE");
  expect_bad({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT");
  expect_bad({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}}, "LOCAL_WORLD_SIZE");
  expect_bad({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"ACCEL_STORE_HOSTED", "perhaps"}},
             "ACCEL_STORE_HOSTED");
}

TEST(ProcessPlace, ThreadCounts) {
  EXPECT_EQ(default_thread_count(0, {}, 8, 2), 4);
  EXPECT_EQ(default_thread_count(0, {}, 2, 4), 1);
  EXPECT_EQ(default_thread_count(0, {{"OMP_NUM_THREADS", "3"}}, 8, 2), 3);
  EXPECT_EQ(default_thread_count(5, {{"OMP_NUM_THREADS", "3"}}, 8, 2), 5);
}
