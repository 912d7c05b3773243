// What `accel launch` will start: the merge of its flags with the configuration file, and the
// environment each rank gets. Pure C++: no LibTorch, no processes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace accel::launch {

struct LaunchOptions {
  std::optional<int> num_processes;  // total across machines, as Accelerate
  std::optional<int> num_machines;
  std::optional<int> machine_rank;
  std::optional<std::string> main_process_ip;
  std::optional<int> main_process_port;  // 0 = pick a free one (single machine only)
  std::optional<std::string> config_file;
  std::optional<std::string> mixed_precision;
  std::optional<int> gradient_accumulation_steps;
  std::optional<int> num_cpu_threads_per_process;
  std::optional<int> nproc_per_node;   // torchrun's spelling: processes on each machine
  std::optional<int> max_restarts;     // restarts of the whole attempt after a rank fails
  std::optional<std::string> gpu_ids;  // "all" or "0,2": CUDA_VISIBLE_DEVICES of every rank
  std::optional<std::string> log_dir;  // one log file per rank
  bool debug = false;                  // ACCELERATE_DEBUG_MODE: check collectives' shapes
  bool cpu = false;
  std::vector<std::string> command;  // program and its arguments
};

struct LaunchPlan {
  int world_size = 1;
  int local_processes = 1;
  int machine_rank = 0;
  int num_machines = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;     // 0: the launcher picks a free port and holds it for rank 0
  bool pick_port = false;  // this launcher picks (and holds) the port that rank 0's store opens
  int threads_per_process = 1;
  std::string config_file;  // resolved path, or "" when no file is used
  int max_restarts = 0;
  std::string log_dir;        // "" = the ranks write to the launcher's stdout and stderr
  std::string machines_from;  // "" or where the machine count and rank came from ("SLURM's srun")
  // Variables every rank gets in addition to the launcher's own environment.
  std::map<std::string, std::string> common_env;
};

// Validates the options and the configuration file (the same validation the library applies) and
// decides the plan. Throws accel::Error naming the flag or key at fault.
LaunchPlan make_plan(const LaunchOptions& options, const config::EnvMap& env, int cpus);

// The full environment ("K=V") of the rank with local index `local_rank`. `port` is the store's
// actual port.
// `attempt` counts restarts (0 first), exported as TORCHELASTIC_RESTART_COUNT as torchrun does.
std::vector<std::string> rank_environment(const LaunchPlan& plan, int local_rank, int port,
                                          const std::string& run_id, const config::EnvMap& base,
                                          int attempt = 0);

// A random job id: keeps two jobs' rendezvous keys apart even on one store.
std::string new_run_id();

}  // namespace accel::launch
