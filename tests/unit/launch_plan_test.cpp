// What `accel launch` starts: flags merged with the file, and each rank's environment.
#include <gtest/gtest.h>

#include <fstream>

#include "common/error.hpp"
#include "launch/plan.hpp"

using accel::launch::LaunchOptions;
using accel::launch::make_plan;
using accel::launch::rank_environment;

namespace {

LaunchOptions with_command() {
  LaunchOptions o;
  o.command = {"./train", "--epochs", "1"};
  return o;
}

std::string lookup(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& kv : env)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return "<unset>";
}

const accel::config::EnvMap kNoConfigHome{{"HF_HOME", "/nonexistent-hf-home"}};

}  // namespace

TEST(LaunchPlan, SingleMachineDefaults) {
  auto o = with_command();
  o.num_processes = 2;
  const auto plan = make_plan(o, kNoConfigHome, 2);
  EXPECT_EQ(plan.world_size, 2);
  EXPECT_EQ(plan.local_processes, 2);
  EXPECT_TRUE(plan.pick_port);
  EXPECT_EQ(plan.master_port, 0) << "a free port is picked";
  EXPECT_EQ(plan.threads_per_process, 1);
  const auto env = rank_environment(plan, 1, 40001, "run1", {{"PATH", "/bin"}, {"RANK", "9"}});
  EXPECT_EQ(lookup(env, "RANK"), "1");
  EXPECT_EQ(lookup(env, "LOCAL_RANK"), "1");
  EXPECT_EQ(lookup(env, "WORLD_SIZE"), "2");
  EXPECT_EQ(lookup(env, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(lookup(env, "MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(lookup(env, "MASTER_PORT"), "40001");
  EXPECT_EQ(lookup(env, "ACCEL_STORE_HOSTED"), "<unset>") << "rank 0 hosts the store";
  EXPECT_EQ(lookup(env, "ACCEL_RUN_ID"), "run1");
  EXPECT_EQ(lookup(env, "OMP_NUM_THREADS"), "1");
  EXPECT_EQ(lookup(env, "OPENBLAS_NUM_THREADS"), "1");
  EXPECT_EQ(lookup(env, "PATH"), "/bin");
}

TEST(LaunchPlan, OneProcessOpensNoStore) {
  const auto plan = make_plan(with_command(), kNoConfigHome, 2);
  EXPECT_EQ(plan.world_size, 1);
  EXPECT_FALSE(plan.pick_port);
  const auto env = rank_environment(plan, 0, 0, "r", {{"MASTER_PORT", "1"}});
  EXPECT_EQ(lookup(env, "WORLD_SIZE"), "1");
  EXPECT_EQ(lookup(env, "MASTER_PORT"), "<unset>");
}

TEST(LaunchPlan, FlagsOverrideFileThroughEnvironment) {
  const std::string path = ::testing::TempDir() + "launch_cfg.yaml";
  std::ofstream(path) << "num_processes: 3\nmixed_precision: fp16\nmain_process_port: 29555\n";
  auto o = with_command();
  o.config_file = path;
  o.mixed_precision = "BF16";
  o.gradient_accumulation_steps = 4;
  const auto plan = make_plan(o, kNoConfigHome, 6);
  EXPECT_EQ(plan.world_size, 3) << "from the file";
  EXPECT_EQ(plan.master_port, 29555);
  EXPECT_EQ(plan.threads_per_process, 2);
  EXPECT_EQ(plan.common_env.at("ACCEL_CONFIG_FILE"), path);
  EXPECT_EQ(plan.common_env.at("ACCELERATE_MIXED_PRECISION"), "bf16");
  EXPECT_EQ(plan.common_env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "4");
  o.num_processes = 2;
  EXPECT_EQ(make_plan(o, kNoConfigHome, 6).world_size, 2) << "the flag beats the file";
}

TEST(LaunchPlan, UserThreadSettingsAreKept) {
  auto o = with_command();
  o.num_processes = 2;
  auto env = kNoConfigHome;
  env["OMP_NUM_THREADS"] = "3";
  env["OPENBLAS_NUM_THREADS"] = "2";
  const auto plan = make_plan(o, env, 8);
  EXPECT_EQ(plan.common_env.at("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(plan.common_env.count("OPENBLAS_NUM_THREADS"), 0u);
}

TEST(LaunchPlan, MultiMachineRanks) {
  auto o = with_command();
  o.num_processes = 4;
  o.num_machines = 2;
  o.machine_rank = 1;
  o.main_process_ip = "10.0.0.1";
  o.main_process_port = 29600;
  const auto plan = make_plan(o, kNoConfigHome, 4);
  EXPECT_EQ(plan.local_processes, 2);
  EXPECT_FALSE(plan.pick_port) << "every machine is given the port";
  const auto env = rank_environment(plan, 1, 29600, "r", {});
  EXPECT_EQ(lookup(env, "RANK"), "3");
  EXPECT_EQ(lookup(env, "LOCAL_RANK"), "1");
  EXPECT_EQ(lookup(env, "GROUP_RANK"), "1");
  EXPECT_EQ(lookup(env, "MASTER_ADDR"), "10.0.0.1");
}

TEST(LaunchPlan, BadFlagsAreClearErrors) {
  auto expect_bad = [](LaunchOptions o, const std::string& part) {
    try {
      make_plan(o, kNoConfigHome, 2);
      ADD_FAILURE() << "accepted: " << part;
    } catch (const accel::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto o = with_command();
  o.num_processes = 0;
  expect_bad(o, "--num_processes");
  o = with_command();
  o.num_processes = 3;
  o.num_machines = 2;
  expect_bad(o, "does not divide");
  o = with_command();
  o.num_processes = 4;
  o.num_machines = 2;
  o.main_process_port = 1234;
  expect_bad(o, "--main_process_ip");
  o.main_process_ip = "10.0.0.1";
  o.main_process_port = 0;
  expect_bad(o, "--main_process_port");
  o = with_command();
  o.mixed_precision = "fp32";
  expect_bad(o, "--mixed_precision");
  o = with_command();
  o.config_file = "/nonexistent/cfg.yaml";
  expect_bad(o, "/nonexistent/cfg.yaml");
  o = with_command();
  o.command.clear();
  expect_bad(o, "no program");
}

TEST(LaunchPlan, AskAtLaunchNeedsTheFlag) {
  const std::string path = ::testing::TempDir() + "ask.yaml";
  std::ofstream(path) << "num_processes: -1\n";
  auto o = with_command();
  o.config_file = path;
  EXPECT_THROW(make_plan(o, kNoConfigHome, 2), accel::Error);
  o.num_processes = 2;
  EXPECT_EQ(make_plan(o, kNoConfigHome, 2).world_size, 2);
}

TEST(LaunchPlan, RunIdsDiffer) {
  EXPECT_NE(accel::launch::new_run_id(), accel::launch::new_run_id());
  EXPECT_EQ(accel::launch::new_run_id().size(), 16u);
}

TEST(LaunchPlan, SrunOneTaskPerNodeGivesTheMachines) {
  auto o = with_command();
  o.num_processes = 4;
  accel::config::EnvMap env = kNoConfigHome;
  for (auto kv :
       std::vector<std::pair<std::string, std::string>>{{"SLURM_PROCID", "1"},
                                                        {"SLURM_STEP_ID", "0"},
                                                        {"SLURM_STEP_NUM_NODES", "2"},
                                                        {"SLURM_NODEID", "1"},
                                                        {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                                                        {"SLURM_STEP_NODELIST", "node[07-08]"},
                                                        {"SLURM_JOB_ID", "4242"}})
    env[kv.first] = kv.second;
  const auto plan = make_plan(o, env, 4);
  EXPECT_EQ(plan.num_machines, 2);
  EXPECT_EQ(plan.machine_rank, 1);
  EXPECT_EQ(plan.master_addr, "node07");
  EXPECT_EQ(plan.master_port, 15000 + 4242);
  EXPECT_EQ(plan.local_processes, 2);
  const auto rank_env = rank_environment(plan, 1, plan.master_port, "r", env, 2);
  EXPECT_EQ(lookup(rank_env, "RANK"), "3");
  EXPECT_EQ(lookup(rank_env, "TORCHELASTIC_RESTART_COUNT"), "2");

  auto disagree = o;
  disagree.num_machines = 3;
  try {
    make_plan(disagree, env, 4);
    ADD_FAILURE() << "accepted --num_machines 3 with SLURM_STEP_NUM_NODES=2";
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NUM_NODES=2"), std::string::npos) << e.what();
  }
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  try {
    make_plan(o, env, 4);
    ADD_FAILURE() << "accepted two launcher tasks on one node";
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("one task per node"), std::string::npos) << e.what();
  }
}

TEST(LaunchPlan, RestartsLogsAndDevices) {
  auto o = with_command();
  o.num_processes = 2;
  o.max_restarts = 3;
  o.gpu_ids = "0,2";
  o.debug = true;
  const auto plan = make_plan(o, kNoConfigHome, 2);
  EXPECT_EQ(plan.max_restarts, 3);
  const auto env = rank_environment(plan, 0, 40001, "r", {}, 1);
  EXPECT_EQ(lookup(env, "CUDA_VISIBLE_DEVICES"), "0,2");
  EXPECT_EQ(lookup(env, "ACCELERATE_DEBUG_MODE"), "true");
  EXPECT_EQ(lookup(env, "TORCHELASTIC_MAX_RESTARTS"), "3");
  EXPECT_EQ(lookup(env, "TORCHELASTIC_RESTART_COUNT"), "1");
  auto bad_ids = o;
  bad_ids.gpu_ids = "0,x";
  EXPECT_THROW(make_plan(bad_ids, kNoConfigHome, 2), accel::Error);
  auto multi = o;
  multi.num_machines = 2;
  multi.main_process_ip = "10.0.0.1";
  multi.main_process_port = 29500;
  EXPECT_THROW(make_plan(multi, kNoConfigHome, 2), accel::Error)
      << "restarts across machines need torchrun's shared store";
  auto per_node = with_command();
  per_node.nproc_per_node = 3;
  per_node.num_processes = 4;
  EXPECT_THROW(make_plan(per_node, kNoConfigHome, 2), accel::Error);
}
