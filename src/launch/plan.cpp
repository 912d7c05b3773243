#include "launch/plan.hpp"

#include <algorithm>
#include <random>

#include "cluster/hostlist.hpp"
#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::launch {

namespace {

void put_int(std::map<std::string, std::string>& env, const char* name, long long v) {
  env[name] = std::to_string(v);
}

long long env_number(const config::EnvMap& env, const char* name, long long min, long long max) {
  const std::string& v = env.at(name);
  long long out = 0;
  if (!parse_int(v, &out) || out < min || out > max)
    fail(Errc::invalid_argument, "environment variable " + std::string(name) + "='" + v +
                                     "' is not an integer from " + std::to_string(min) + " to " +
                                     std::to_string(max) + " (set by SLURM's srun)");
  return out;
}

// `srun accel launch ...` with one task per node: the machine count, this machine's rank and the
// first node's address come from SLURM, as Accelerate's SLURM example passes them by hand. Flags
// given as well must agree.
void machines_from_slurm(LaunchOptions& o, const config::EnvMap& env, std::string* from) {
  if (!env.count("SLURM_PROCID") || !(env.count("SLURM_STEP_ID") || env.count("SLURM_STEPID")))
    return;
  const char* nodes_var = env.count("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES"
                          : env.count("SLURM_NNODES")       ? "SLURM_NNODES"
                                                            : nullptr;
  if (!nodes_var || !env.count("SLURM_NODEID")) return;
  const int nodes = static_cast<int>(env_number(env, nodes_var, 1, 1 << 20));
  const int node = static_cast<int>(env_number(env, "SLURM_NODEID", 0, nodes - 1));
  const char* counts_var = env.count("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                           : env.count("SLURM_TASKS_PER_NODE")    ? "SLURM_TASKS_PER_NODE"
                                                                  : nullptr;
  if (counts_var) {
    std::vector<int> counts;
    try {
      counts = cluster::expand_task_counts(env.at(counts_var));
    } catch (const Error& e) {
      fail(Errc::invalid_argument, "environment variable " + std::string(counts_var) + ": " +
                                       e.what() + " (set by SLURM's srun)");
    }
    if (node < static_cast<int>(counts.size()) && counts[node] != 1)
      fail(Errc::invalid_argument,
           "srun started " + std::to_string(counts[node]) + " tasks on this node (" + counts_var +
               "='" + env.at(counts_var) +
               "'), each of which would launch every rank of the machine: run accel launch with "
               "one task per node (srun --ntasks-per-node=1 accel launch ...)");
  }
  if (o.num_machines && *o.num_machines != nodes)
    fail(Errc::invalid_argument,
         "two launchers disagree on the number of machines: "
         "--num_machines " +
             std::to_string(*o.num_machines) + " but " + nodes_var + "=" + std::to_string(nodes) +
             " (SLURM's srun)");
  if (o.machine_rank && *o.machine_rank != node)
    fail(Errc::invalid_argument, "--machine_rank " + std::to_string(*o.machine_rank) +
                                     " disagrees with SLURM_NODEID=" + std::to_string(node) +
                                     " (SLURM's srun)");
  o.num_machines = nodes;
  o.machine_rank = node;
  *from = "SLURM's srun (" + std::string(nodes_var) + ", SLURM_NODEID)";
  if (nodes == 1) return;
  if (!o.main_process_ip) {
    const char* list_var = env.count("SLURM_STEP_NODELIST")  ? "SLURM_STEP_NODELIST"
                           : env.count("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                             : nullptr;
    if (!list_var)
      fail(Errc::invalid_argument,
           "srun gave no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: pass --main_process_ip");
    try {
      o.main_process_ip = cluster::expand_hostlist(env.at(list_var)).front();
    } catch (const Error& e) {
      fail(Errc::invalid_argument, "environment variable " + std::string(list_var) + ": " +
                                       e.what() + " (set by SLURM's srun)");
    }
  }
  if (!o.main_process_port) {
    long long job = 0;
    if (env.count("MASTER_PORT")) {
      o.main_process_port = static_cast<int>(env_number(env, "MASTER_PORT", 1, 65535));
    } else if (env.count("SLURM_JOB_ID") && parse_int(env.at("SLURM_JOB_ID"), &job) && job >= 0) {
      o.main_process_port = 15000 + static_cast<int>(job % 10000);
    }
  }
}

// The configuration file as make_plan reads it: the file over the defaults, no environment.
struct FileLayer {
  std::string path;  // "" when no file is used
  config::Resolved settings;

  int integer(const char* key) const { return static_cast<int>(settings.integer(key)); }
  bool sets(const char* key) const {
    return settings.at(key).origin.source == config::Source::kFile;
  }
};

// As Accelerate: --config_file, else the default file when it exists (unless --cpu without a
// file).
FileLayer load_file_layer(const LaunchOptions& o, const config::EnvMap& env) {
  config::Config file;
  std::string path;
  if (o.config_file) {
    file.load_file(*o.config_file);
    path = *o.config_file;
  } else if (!o.cpu) {
    path = file.load_default_file(env);
  }
  return {path, file.resolve({})};
}

void decide_machines(LaunchPlan& plan, const LaunchOptions& o, const FileLayer& file) {
  plan.num_machines = o.num_machines.value_or(file.integer("num_machines"));
  plan.machine_rank = o.machine_rank.value_or(file.integer("machine_rank"));
  if (plan.num_machines < 1) fail(Errc::invalid_argument, "--num_machines must be at least 1");
  if (plan.machine_rank < 0 || plan.machine_rank >= plan.num_machines)
    fail(Errc::invalid_argument, "--machine_rank " + std::to_string(plan.machine_rank) +
                                     " is not in 0.." + std::to_string(plan.num_machines - 1));
}

// The total from --nproc_per_node, --num_processes or the file (in that order), split evenly over
// the machines.
void decide_processes(LaunchPlan& plan, const LaunchOptions& o, const FileLayer& file) {
  int total = 1;
  if (o.nproc_per_node) {
    if (*o.nproc_per_node < 1) fail(Errc::invalid_argument, "--nproc_per_node must be at least 1");
    total = *o.nproc_per_node * plan.num_machines;
    if (o.num_processes && *o.num_processes != total)
      fail(Errc::invalid_argument, "--num_processes " + std::to_string(*o.num_processes) +
                                       " (the total) disagrees with "
                                       "--nproc_per_node " +
                                       std::to_string(*o.nproc_per_node) + " on " +
                                       std::to_string(plan.num_machines) + " machine(s)");
  } else if (o.num_processes) {
    total = *o.num_processes;
  } else if (file.sets("num_processes")) {
    total = file.integer("num_processes");
    if (total == -1)
      fail(Errc::invalid_argument, "num_processes is -1 in " + file.path +
                                       " (Accelerate's 'ask at launch'): pass --num_processes");
  }
  if (total < 1) fail(Errc::invalid_argument, "--num_processes must be at least 1");
  if (total % plan.num_machines != 0)
    fail(Errc::invalid_argument, "--num_processes " + std::to_string(total) +
                                     " (the total over all machines) does not divide by "
                                     "--num_machines " +
                                     std::to_string(plan.num_machines));
  plan.world_size = total;
  plan.local_processes = total / plan.num_machines;
}

// Machine 0's address and the store's port; port 0 means this launcher picks one.
void decide_main_process(LaunchPlan& plan, const LaunchOptions& o, const FileLayer& file) {
  const std::string ip = o.main_process_ip.value_or(
      file.sets("main_process_ip") ? file.settings.text("main_process_ip") : std::string());
  const int port = o.main_process_port.value_or(file.integer("main_process_port"));
  if (port < 0 || port > 65535)
    fail(Errc::invalid_argument, "--main_process_port must be in 0..65535");
  if (plan.num_machines > 1) {
    if (ip.empty())
      fail(Errc::invalid_argument,
           "--main_process_ip is needed with --num_machines > 1 (the address of machine 0)");
    if (port == 0)
      fail(Errc::invalid_argument,
           "--main_process_port is needed with --num_machines > 1: every "
           "machine must know the port before machine 0 opens it");
  }
  plan.master_addr = ip.empty() ? "127.0.0.1" : ip;
  plan.master_port = port;
  plan.pick_port = plan.world_size > 1 && port == 0;
}

void decide_threads_restarts_logs(LaunchPlan& plan, const LaunchOptions& o, int cpus) {
  if (o.num_cpu_threads_per_process) {
    if (*o.num_cpu_threads_per_process < 1)
      fail(Errc::invalid_argument, "--num_cpu_threads_per_process must be at least 1");
    plan.threads_per_process = *o.num_cpu_threads_per_process;
  } else {
    plan.threads_per_process = std::max(1, cpus / plan.local_processes);
  }

  if (o.max_restarts) {
    if (*o.max_restarts < 0) fail(Errc::invalid_argument, "--max_restarts must be at least 0");
    // Each machine's launcher would restart its own ranks and race the others to the store that
    // rank 0 hosts; torchrun's agents share a store that outlives attempts.
    if (*o.max_restarts > 0 && plan.num_machines > 1)
      fail(Errc::unsupported,
           "--max_restarts with --num_machines > 1 is not supported by accel launch: run the "
           "program under torchrun --max-restarts with a c10d rendezvous, which libaccel joins");
    plan.max_restarts = *o.max_restarts;
  }
  if (o.log_dir) {
    if (o.log_dir->empty()) fail(Errc::invalid_argument, "--log_dir is empty");
    plan.log_dir = *o.log_dir;
  }
}

// Throws unless `gpu_ids` is a comma-separated list of device numbers.
void check_gpu_ids(const std::string& gpu_ids) {
  size_t start = 0;
  while (start <= gpu_ids.size()) {
    size_t comma = gpu_ids.find(',', start);
    if (comma == std::string::npos) comma = gpu_ids.size();
    long long id = 0;
    const std::string item = gpu_ids.substr(start, comma - start);
    if (!parse_int(item, &id) || id < 0 || id > 1023)
      fail(Errc::invalid_argument, "--gpu_ids '" + gpu_ids + "': '" + item +
                                       "' is not a device number (write 'all' or a list like "
                                       "0,1)");
    start = comma + 1;
  }
}

void set_common_env(LaunchPlan& plan, const LaunchOptions& o, const FileLayer& file,
                    const config::EnvMap& env) {
  auto& ce = plan.common_env;
  if (o.debug) ce["ACCELERATE_DEBUG_MODE"] = "true";
  const std::string gpu_ids =
      o.gpu_ids ? *o.gpu_ids
                : (file.sets("gpu_ids") ? file.settings.text("gpu_ids") : std::string("all"));
  if (gpu_ids != "all") {
    // As Accelerate: the ranks see only these devices.
    check_gpu_ids(gpu_ids);
    ce["CUDA_VISIBLE_DEVICES"] = gpu_ids;
  }
  if (!file.path.empty()) ce["ACCEL_CONFIG_FILE"] = file.path;
  // Flags override the file through the environment, which the library ranks above the file.
  if (o.mixed_precision) {
    const config::KeySpec* spec = config::find_key("mixed_precision");
    ce["ACCELERATE_MIXED_PRECISION"] = config::normalize(
        *spec, *o.mixed_precision, {config::Source::kSetter, "--mixed_precision"});
  }
  if (o.gradient_accumulation_steps) {
    const config::KeySpec* spec = config::find_key("gradient_accumulation_steps");
    ce["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] =
        config::normalize(*spec, std::to_string(*o.gradient_accumulation_steps),
                          {config::Source::kSetter, "--gradient_accumulation_steps"});
  }
  if (o.cpu) ce["ACCELERATE_USE_CPU"] = "true";
  // Thread counts: OpenBLAS reads its own variable at load time, before any library code runs.
  const bool user_threads = env.count("OMP_NUM_THREADS") > 0;
  const std::string threads = user_threads && !o.num_cpu_threads_per_process
                                  ? env.at("OMP_NUM_THREADS")
                                  : std::to_string(plan.threads_per_process);
  ce["OMP_NUM_THREADS"] = threads;
  if (!env.count("OPENBLAS_NUM_THREADS") || o.num_cpu_threads_per_process)
    ce["OPENBLAS_NUM_THREADS"] = threads;
}

}  // namespace

LaunchPlan make_plan(const LaunchOptions& options, const config::EnvMap& env, int cpus) {
  if (options.command.empty()) fail(Errc::invalid_argument, "no program to launch");
  LaunchOptions o = options;
  std::string machines_from;
  machines_from_slurm(o, env, &machines_from);
  const FileLayer file = load_file_layer(o, env);

  LaunchPlan plan;
  plan.config_file = file.path;
  plan.machines_from = machines_from;
  decide_machines(plan, o, file);
  decide_processes(plan, o, file);
  decide_main_process(plan, o, file);
  decide_threads_restarts_logs(plan, o, cpus);
  set_common_env(plan, o, file, env);
  return plan;
}

std::vector<std::string> rank_environment(const LaunchPlan& plan, int local_rank, int port,
                                          const std::string& run_id, const config::EnvMap& base,
                                          int attempt) {
  config::EnvMap env = base;
  for (const auto& [k, v] : plan.common_env) env[k] = v;
  put_int(env, "RANK",
          static_cast<long long>(plan.machine_rank) * plan.local_processes + local_rank);
  put_int(env, "LOCAL_RANK", local_rank);
  put_int(env, "WORLD_SIZE", plan.world_size);
  put_int(env, "LOCAL_WORLD_SIZE", plan.local_processes);
  put_int(env, "GROUP_RANK", plan.machine_rank);
  put_int(env, "GROUP_WORLD_SIZE", plan.num_machines);
  put_int(env, "TORCHELASTIC_RESTART_COUNT", attempt);
  put_int(env, "TORCHELASTIC_MAX_RESTARTS", plan.max_restarts);
  // The launcher's own engine (torchrun, srun, mpirun) described the launcher, not these ranks.
  env.erase("TORCHELASTIC_USE_AGENT_STORE");
  if (plan.world_size > 1) {
    env["MASTER_ADDR"] = plan.master_addr;
    put_int(env, "MASTER_PORT", port);
    // Rank 0 hosts the store at MASTER_PORT, as under torchrun's environment contract, so PyTorch
    // programs run under `accel launch` too.
    env.erase("ACCEL_STORE_HOSTED");
    env.erase("ACCEL_STORE_FD");  // an outer launcher's; this one adds its own for rank 0
    env["ACCEL_RUN_ID"] = run_id;
  } else {
    for (const char* k :
         {"MASTER_ADDR", "MASTER_PORT", "ACCEL_STORE_HOSTED", "ACCEL_STORE_FD", "ACCEL_RUN_ID"})
      env.erase(k);
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::string new_run_id() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 16; ++i) id += hex[rd() % 16];
  return id;
}

}  // namespace accel::launch
