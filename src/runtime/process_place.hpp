// Where this process stands in the job, read from the torchrun-compatible environment. Pure C++.
#pragma once

#include <string>

#include "config/config.hpp"

namespace accel::runtime {

struct ProcessPlace {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool store_hosted = false;  // the launcher hosts the store: every rank, rank 0 too, is a client
  std::string run_id;         // prefixes rendezvous keys so that two jobs on one store never meet

  bool distributed() const { return world_size > 1; }
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// ACCEL_STORE_HOSTED, ACCEL_RUN_ID (else TORCHELASTIC_RUN_ID). Without WORLD_SIZE the process is a
// world of one. Throws accel::Error(config) naming the variable that is malformed or inconsistent.
ProcessPlace read_process_place(const config::EnvMap& env);

// Logical CPUs this process may run on (its affinity mask).
int available_cpus();

// Intra-op threads per rank: an explicit `num_threads`, else OMP_NUM_THREADS, else cpus / local
// ranks.
int default_thread_count(int num_threads_setting, const config::EnvMap& env, int cpus,
                         int local_world_size);

}  // namespace accel::runtime
