// Where this process stands in the job, read from the environment of whichever engine started it:
// accel launch or torchrun (RANK, WORLD_SIZE, ...), Open MPI, MPICH/Intel MPI (Hydra), MVAPICH, or
// SLURM's srun. Pure C++.
#pragma once

#include <string>

#include "config/config.hpp"

namespace accel::runtime {

struct ProcessPlace {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  // False when the engine does not say which ranks share this machine (bare RANK/WORLD_SIZE, a
  // Kubernetes pod, MPICH without MPI_LOCALRANKID): the census finds out from host identities.
  bool local_known = true;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Rank 0 only: a socket bound to MASTER_PORT, inherited from `accel launch`, for the store to
  // serve on (-1: none; the store binds the port itself).
  int store_fd = -1;
  bool store_hosted = false;  // the launcher hosts the store: every rank, rank 0 too, is a client
  std::string run_id;         // prefixes rendezvous keys so that two jobs on one store never meet
  int attempt = 0;            // the restart count: a restarted attempt never meets the old keys
  std::string job_token;      // the secret ranks prove to the store (empty: none given)
  std::string job_token_source;  // where it came from, for messages
  std::string listen_address;    // ACCEL_LISTEN_ADDRESS: where rank 0's store listens, if set
  std::string engine = "the environment";  // who started this process, for messages
  std::string endpoint_source;             // where the store's address came from, for messages

  bool distributed() const { return world_size > 1; }
  // The engine says every rank runs on this machine.
  bool all_local() const { return local_known && local_world_size == world_size; }
};

// Reads the place from `env`. Without any engine's variables the process is a world of one.
// Throws accel::Error(config) naming the variable that is malformed, out of range or inconsistent,
// and the engine that set it.
ProcessPlace read_process_place(const config::EnvMap& env);

// Logical CPUs this process may run on (its affinity mask).
int available_cpus();

// Intra-op threads per rank: an explicit `num_threads`, else OMP_NUM_THREADS, else cpus / local
// ranks.
int default_thread_count(int num_threads_setting, const config::EnvMap& env, int cpus,
                         int local_world_size);

}  // namespace accel::runtime
