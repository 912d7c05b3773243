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
  EXPECT_FALSE(p.local_known) << "without LOCAL_WORLD_SIZE the census finds the machine's ranks";
  EXPECT_EQ(p.master_port, 29500);
}

TEST(ProcessPlace, TorchrunAgentStoreAndAttempt) {
  const auto p = read_process_place({{"RANK", "0"},
                                     {"WORLD_SIZE", "2"},
                                     {"LOCAL_RANK", "0"},
                                     {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "127.0.0.1"},
                                     {"MASTER_PORT", "29400"},
                                     {"TORCHELASTIC_RUN_ID", "none"},
                                     {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                     {"TORCHELASTIC_RESTART_COUNT", "3"}});
  EXPECT_TRUE(p.store_hosted) << "rank 0 joins torchrun's agent store as a client";
  EXPECT_EQ(p.attempt, 3);
  EXPECT_EQ(p.engine, "torchrun");
  const auto standalone = read_process_place({{"RANK", "0"},
                                              {"WORLD_SIZE", "2"},
                                              {"TORCHELASTIC_RUN_ID", "x"},
                                              {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_FALSE(standalone.store_hosted);
}

TEST(ProcessPlace, OpenMpi) {
  const auto p = read_process_place({{"OMPI_COMM_WORLD_RANK", "1"},
                                     {"OMPI_COMM_WORLD_SIZE", "2"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                     {"OMPI_MCA_ess_base_jobid", "77"}});
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 2);
  EXPECT_TRUE(p.local_known);
  EXPECT_EQ(p.master_addr, "127.0.0.1") << "one host: loopback";
  EXPECT_EQ(p.master_port, 29500);
  EXPECT_EQ(p.run_id, "mpi-77");
}

TEST(ProcessPlace, HydraWithoutLocalCountsNeedsAnAddressOnlyWhenUnsure) {
  try {
    read_process_place({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
    ADD_FAILURE() << "accepted an MPI job of unknown hosts without MASTER_ADDR";
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MPI_LOCALNRANKS"), std::string::npos) << e.what();
  }
  const auto p = read_process_place(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(p.rank, 1);
  EXPECT_FALSE(p.local_known);
  EXPECT_EQ(p.master_addr, "node1");
  EXPECT_EQ(p.master_port, 4000);
}

TEST(ProcessPlace, SlurmTasks) {
  accel::config::EnvMap env{{"SLURM_PROCID", "4"},
                            {"SLURM_STEP_ID", "0"},
                            {"SLURM_STEP_NUM_TASKS", "7"},
                            {"SLURM_NTASKS", "7"},
                            {"SLURM_LOCALID", "1"},
                            {"SLURM_NODEID", "1"},
                            {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"},
                            {"SLURM_STEP_NODELIST", "gpu[007-008],login"},
                            {"SLURM_JOB_ID", "123456"}};
  const auto p = read_process_place(env);
  EXPECT_EQ(p.rank, 4);
  EXPECT_EQ(p.world_size, 7);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 3);
  EXPECT_EQ(p.master_addr, "gpu007") << "the first host of the step";
  EXPECT_EQ(p.master_port, 15000 + 3456) << "derived from the job id, as Lightning";
  env["MASTER_PORT"] = "29999";
  EXPECT_EQ(read_process_place(env).master_port, 29999);
  // One node: loopback.
  const auto one = read_process_place({{"SLURM_PROCID", "1"},
                                       {"SLURM_STEP_ID", "0"},
                                       {"SLURM_STEP_NUM_TASKS", "2"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_NODEID", "0"},
                                       {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                       {"SLURM_STEP_NODELIST", "vm"},
                                       {"SLURM_JOB_ID", "5"}});
  EXPECT_EQ(one.master_addr, "127.0.0.1");
  EXPECT_EQ(one.local_world_size, 2);
  // A batch script (no step) is one process.
  EXPECT_EQ(read_process_place({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}).world_size, 1);
}

TEST(ProcessPlace, InnermostLauncherWins) {
  // accel launch (or torchrun) run by srun, one task per node: RANK describes this process.
  const auto p = read_process_place({{"RANK", "3"},
                                     {"WORLD_SIZE", "4"},
                                     {"LOCAL_RANK", "1"},
                                     {"LOCAL_WORLD_SIZE", "2"},
                                     {"ACCEL_RUN_ID", "r"},
                                     {"SLURM_PROCID", "1"},
                                     {"SLURM_STEP_ID", "0"},
                                     {"SLURM_STEP_NUM_TASKS", "2"}});
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.engine, "accel launch");
}

TEST(ProcessPlace, EngineErrorsNameVariableAndEngine) {
  auto expect_bad = [](accel::config::EnvMap env, std::vector<std::string> words) {
    try {
      read_process_place(env);
      ADD_FAILURE() << "accepted " << words[0];
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.code(), accel::Errc::config);
      for (const auto& w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in " << e.what();
    }
  };
  const accel::config::EnvMap step{{"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "9"}};
  auto with = [&](accel::config::EnvMap extra) {
    accel::config::EnvMap e = step;
    for (auto& kv : extra) e[kv.first] = kv.second;
    return e;
  };
  expect_bad(with({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}),
             {"SLURM_PROCID='2'", "0 to 1", "SLURM_NTASKS=2", "srun"});
  expect_bad(with({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "0"},
                   {"SLURM_TASKS_PER_NODE", "1"},
                   {"SLURM_JOB_NODELIST", "node[1-2"}}),
             {"SLURM_JOB_NODELIST", "node[1-2", "never closed"});
  expect_bad(with({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "4"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "0"},
                   {"SLURM_TASKS_PER_NODE", "2(x3)"}}),
             {"disagree", "SLURM_TASKS_PER_NODE='2(x3)'", "6 tasks", "SLURM_NTASKS=4"});
  expect_bad(with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "x2"}}),
             {"SLURM_TASKS_PER_NODE", "x2"});
  expect_bad({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_SIZE", "4"}},
             {"disagree", "OMPI_COMM_WORLD_SIZE=2", "PMI_SIZE='4'"});
  expect_bad({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"WORLD_SIZE", "4"}},
             {"disagree", "WORLD_SIZE='4'", "OMPI_COMM_WORLD_SIZE=2"});
  expect_bad({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
             {"OMPI_COMM_WORLD_RANK='5'", "Open MPI"});
  expect_bad({{"OMPI_COMM_WORLD_RANK", "0"},
              {"OMPI_COMM_WORLD_SIZE", "4"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
             {"several hosts", "MASTER_ADDR"});
  expect_bad({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RESTART_COUNT", "-1"}},
             {"TORCHELASTIC_RESTART_COUNT"});
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
