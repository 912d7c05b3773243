#include "runtime/process_place.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "cluster/hostlist.hpp"
#include "common/error.hpp"
#include "common/parse.hpp"
#include "security/job_token.hpp"

namespace accel::runtime {

namespace {

// Reads one engine's variables; every message names the variable and the engine.
class EnvReader {
 public:
  EnvReader(const config::EnvMap& env, std::string engine)
      : env_(env), engine_(std::move(engine)) {}

  bool has(const char* name) const { return env_.count(name) > 0; }
  const std::string* text(const char* name) const {
    auto it = env_.find(name);
    return it == env_.end() ? nullptr : &it->second;
  }
  // The first of `names` that is set, or nullptr.
  const char* first_set(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (has(n)) return n;
    return nullptr;
  }

  long long integer(const char* name, long long min, long long max,
                    const std::string& bound_note = "") const {
    const std::string* v = text(name);
    if (!v) fail(Errc::config, "environment variable " + std::string(name) + " is not set" + by());
    long long out = 0;
    if (!parse_int(*v, &out) || out < min || out > max)
      fail(Errc::config, "environment variable " + std::string(name) + "='" + *v +
                             "' is not an integer from " + std::to_string(min) + " to " +
                             std::to_string(max) + bound_note + by());
    return out;
  }
  long long integer_or(const char* name, long long fallback, long long min, long long max,
                       const std::string& bound_note = "") const {
    return has(name) ? integer(name, min, max, bound_note) : fallback;
  }
  bool boolean_or(const char* name, bool fallback) const {
    const std::string* v = text(name);
    if (!v) return fallback;
    bool out = false;
    if (!config::parse_bool(*v, &out))
      fail(Errc::config,
           "environment variable " + std::string(name) + "='" + *v + "' is not a boolean" + by());
    return out;
  }
  std::string by() const { return " (set by " + engine_ + ")"; }
  const std::string& engine() const { return engine_; }

 private:
  const config::EnvMap& env_;
  std::string engine_;
};

std::string with(const char* name, long long value) {
  return " (" + std::string(name) + "=" + std::to_string(value) + ")";
}

// The store's address and port: MASTER_ADDR/MASTER_PORT when set, else what the engine implies.
void read_endpoint(const EnvReader& r, ProcessPlace& p, const std::string& default_addr,
                   int default_port, const std::string& default_source) {
  if (const std::string* a = r.text("MASTER_ADDR"); a && !a->empty()) {
    p.master_addr = *a;
    p.endpoint_source = "MASTER_ADDR";
  } else {
    p.master_addr = default_addr;
    p.endpoint_source = default_source;
  }
  p.master_port = static_cast<int>(r.integer_or("MASTER_PORT", default_port, 1, 65535));
}

// WORLD_SIZE set by hand next to another engine must agree with it.
void check_world_agrees(const config::EnvMap& env, const ProcessPlace& p, const char* var) {
  auto it = env.find("WORLD_SIZE");
  if (it == env.end()) return;
  long long w = 0;
  if (!parse_int(it->second, &w) || w != p.world_size)
    fail(Errc::config, "two launchers disagree on the number of processes: WORLD_SIZE='" +
                           it->second + "' in the environment, but " + var + "=" +
                           std::to_string(p.world_size) + " (set by " + p.engine +
                           "). Unset WORLD_SIZE, or start the program with one launcher");
}

// torchrun, accel launch, a Kubernetes PyTorchJob, or variables set by hand.
ProcessPlace read_torchrun_contract(const config::EnvMap& env) {
  const char* engine = env.count("ACCEL_RUN_ID")          ? "accel launch"
                       : env.count("TORCHELASTIC_RUN_ID") ? "torchrun"
                                                          : "the environment (RANK, WORLD_SIZE)";
  EnvReader r(env, engine);
  ProcessPlace p;
  p.engine = engine;
  if (!r.has("WORLD_SIZE"))
    fail(Errc::config,
         "environment variable RANK is set but WORLD_SIZE is not; set both (as "
         "accel launch and torchrun do) or neither");
  p.world_size = static_cast<int>(r.integer("WORLD_SIZE", 1, 1 << 20));
  if (p.world_size > 1 && !r.has("RANK"))
    fail(Errc::config, "environment variable WORLD_SIZE=" + std::to_string(p.world_size) +
                           " but RANK is not set");
  p.rank = static_cast<int>(
      r.integer_or("RANK", 0, 0, p.world_size - 1, with("WORLD_SIZE", p.world_size)));
  if (r.has("LOCAL_WORLD_SIZE")) {
    p.local_world_size = static_cast<int>(
        r.integer("LOCAL_WORLD_SIZE", 1, p.world_size, with("WORLD_SIZE", p.world_size)));
    p.local_rank = static_cast<int>(
        r.integer_or("LOCAL_RANK", p.world_size == p.local_world_size ? p.rank : 0, 0,
                     p.local_world_size - 1, with("LOCAL_WORLD_SIZE", p.local_world_size)));
  } else if (p.world_size == 1) {
    p.local_rank = static_cast<int>(r.integer_or("LOCAL_RANK", 0, 0, 0));
  } else {
    // torchrun and accel launch always say; a pod of a PyTorchJob or a hand-made job may not.
    p.local_known = false;
    p.local_world_size = 1;
    p.local_rank = 0;
  }
  read_endpoint(r, p, "127.0.0.1", 29500, "the default 127.0.0.1");
  p.store_hosted = r.boolean_or("ACCEL_STORE_HOSTED", false) ||
                   r.boolean_or("TORCHELASTIC_USE_AGENT_STORE", false);
  if (p.rank == 0 && !p.store_hosted && r.text("ACCEL_STORE_FD"))
    p.store_fd = static_cast<int>(r.integer("ACCEL_STORE_FD", 3, 1 << 20));
  if (const std::string* id = r.text("ACCEL_RUN_ID"))
    p.run_id = *id;
  else if (const std::string* te = r.text("TORCHELASTIC_RUN_ID"))
    p.run_id = *te;
  else
    p.run_id = "default";
  const char* restarts = r.first_set({"TORCHELASTIC_RESTART_COUNT", "ACCEL_RESTART_COUNT"});
  if (restarts) p.attempt = static_cast<int>(r.integer(restarts, 0, 1 << 30));
  return p;
}

struct MpiNames {
  const char* engine;
  const char *rank, *size, *local_rank, *local_size;
  const char* job_id;  // may be nullptr
};

const MpiNames kMpiEngines[] = {
    {"Open MPI's mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid"},
    {"MPICH/Intel MPI (Hydra)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
     nullptr},
    {"MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE", nullptr},
};

ProcessPlace read_mpi(const config::EnvMap& env, const MpiNames& n) {
  EnvReader r(env, n.engine);
  ProcessPlace p;
  p.engine = n.engine;
  p.world_size = static_cast<int>(r.integer(n.size, 1, 1 << 20));
  p.rank = static_cast<int>(r.integer(n.rank, 0, p.world_size - 1, with(n.size, p.world_size)));
  // Two MPI engines' variables at once (one MPI started inside another) must agree.
  for (const auto& other : kMpiEngines) {
    if (&other == &n || !r.has(other.size)) continue;
    long long w = 0;
    if (!parse_int(*r.text(other.size), &w) || w != p.world_size)
      fail(Errc::config,
           "two launchers disagree on the number of processes: " + std::string(n.size) + "=" +
               std::to_string(p.world_size) + " (" + n.engine + ") but " + other.size + "='" +
               *r.text(other.size) + "' (" + other.engine + ")");
  }
  check_world_agrees(env, p, n.size);
  if (r.has(n.local_size)) {
    p.local_world_size =
        static_cast<int>(r.integer(n.local_size, 1, p.world_size, with(n.size, p.world_size)));
    p.local_rank = static_cast<int>(
        r.integer(n.local_rank, 0, p.local_world_size - 1, with(n.local_size, p.local_world_size)));
  } else {
    p.local_known = false;
  }
  const bool one_host = p.local_known && p.local_world_size == p.world_size;
  const std::string* addr = r.text("MASTER_ADDR");
  if ((!addr || addr->empty()) && !one_host && p.world_size > 1)
    fail(Errc::config,
         std::string(n.engine) + " started " + std::to_string(p.world_size) + " ranks " +
             (p.local_known ? "on several hosts (" + std::string(n.local_size) + "=" +
                                  std::to_string(p.local_world_size) + ")"
                            : "and did not say whether they share one host (" +
                                  std::string(n.local_size) + " is not set)") +
             ", and MASTER_ADDR is not set: MPI gives no rendezvous address. Export MASTER_ADDR "
             "(the first host's address) and MASTER_PORT to every rank, e.g. mpirun -x "
             "MASTER_ADDR=host1 -x MASTER_PORT=29500");
  read_endpoint(r, p, "127.0.0.1", 29500, "127.0.0.1 (every rank on one host)");
  p.run_id = "mpi";
  if (n.job_id)
    if (const std::string* id = r.text(n.job_id)) p.run_id += "-" + *id;
  return p;
}

ProcessPlace read_slurm(const config::EnvMap& env) {
  EnvReader r(env, "SLURM's srun");
  ProcessPlace p;
  p.engine = "SLURM's srun";
  const char* world_var = r.first_set({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  if (!world_var)
    fail(Errc::config,
         "SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS is" + r.by());
  p.world_size = static_cast<int>(r.integer(world_var, 1, 1 << 20));
  p.rank = static_cast<int>(
      r.integer("SLURM_PROCID", 0, p.world_size - 1, with(world_var, p.world_size)));
  check_world_agrees(env, p, world_var);

  const char* counts_var = r.first_set({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  const char* nodes_var =
      r.first_set({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  std::vector<int> counts;
  std::vector<std::string> hosts;
  auto parsed = [&](const char* var, auto expand) {
    try {
      return expand(*r.text(var));
    } catch (const Error& e) {
      fail(Errc::config, "environment variable " + std::string(var) + ": " + e.what() + r.by());
    }
  };
  if (counts_var)
    counts =
        parsed(counts_var, [](const std::string& t) { return cluster::expand_task_counts(t); });
  if (nodes_var)
    hosts = parsed(nodes_var, [](const std::string& t) { return cluster::expand_hostlist(t); });
  if (!counts.empty()) {
    const long long total = std::accumulate(counts.begin(), counts.end(), 0LL);
    if (total != p.world_size)
      fail(Errc::config,
           "SLURM's variables disagree on the number of processes: " + std::string(counts_var) +
               "='" + *r.text(counts_var) + "' adds up to " + std::to_string(total) +
               " tasks, but " + world_var + "=" + std::to_string(p.world_size));
    if (!hosts.empty() && hosts.size() != counts.size())
      fail(Errc::config,
           "SLURM's variables disagree on the number of nodes: " + std::string(nodes_var) +
               " lists " + std::to_string(hosts.size()) + " hosts, but " + counts_var + "='" +
               *r.text(counts_var) + "' gives " + std::to_string(counts.size()));
    const int node = static_cast<int>(
        r.integer_or("SLURM_NODEID", 0, 0, static_cast<long long>(counts.size()) - 1,
                     " (" + std::to_string(counts.size()) + " nodes in " + counts_var + ")"));
    p.local_world_size = counts[node];
    p.local_rank = static_cast<int>(r.integer("SLURM_LOCALID", 0, p.local_world_size - 1,
                                              " (" + std::to_string(p.local_world_size) +
                                                  " tasks on node " + std::to_string(node) + ")"));
  } else {
    p.local_known = false;
  }
  const bool one_node = (!counts.empty() && counts.size() == 1) || (hosts.size() == 1);
  if (!r.has("MASTER_ADDR") && !one_node && hosts.empty())
    fail(Errc::config, "SLURM's srun started " + std::to_string(p.world_size) +
                           " tasks but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST names "
                           "their hosts, and MASTER_ADDR is not set");
  // As Lightning: the first host of the step, and a port derived from the job id.
  int port = 29500;
  std::string job = r.text("SLURM_JOB_ID")  ? *r.text("SLURM_JOB_ID")
                    : r.text("SLURM_JOBID") ? *r.text("SLURM_JOBID")
                                            : "";
  long long job_number = 0;
  if (!job.empty()) {
    if (!parse_int(job, &job_number) || job_number < 0)
      fail(Errc::config,
           "environment variable SLURM_JOB_ID='" + job + "' is not a job number" + r.by());
    port = 15000 + static_cast<int>(job_number % 10000);
  }
  read_endpoint(r, p, one_node ? "127.0.0.1" : hosts.front(), port,
                one_node ? "127.0.0.1 (one node)" : "the first host of " + std::string(nodes_var));
  p.run_id = "slurm-" + job + "." + (r.text("SLURM_STEP_ID") ? *r.text("SLURM_STEP_ID") : "0");
  return p;
}

}  // namespace

ProcessPlace read_process_place(const config::EnvMap& env) {
  ProcessPlace p;
  // The innermost launcher wins: torchrun or accel launch under srun or mpirun set RANK for their
  // own ranks, while the outer engine's variables describe the launchers.
  if (env.count("RANK") ||
      (env.count("WORLD_SIZE") && !env.count("OMPI_COMM_WORLD_SIZE") && !env.count("PMI_SIZE") &&
       !env.count("MV2_COMM_WORLD_SIZE") && !env.count("SLURM_PROCID"))) {
    p = read_torchrun_contract(env);
  } else if (auto mpi = std::find_if(std::begin(kMpiEngines), std::end(kMpiEngines),
                                     [&](const MpiNames& n) { return env.count(n.size) > 0; });
             mpi != std::end(kMpiEngines)) {
    p = read_mpi(env, *mpi);
  } else if (env.count("SLURM_PROCID") &&
             (env.count("SLURM_STEP_ID") || env.count("SLURM_STEPID"))) {
    // Only a task of a step (srun): a batch script itself has SLURM_PROCID=0 and the whole
    // allocation's SLURM_NTASKS, and runs as one process.
    p = read_slurm(env);
  }
  if (p.world_size == 1) {
    p.local_known = true;
    p.local_rank = 0;
    p.local_world_size = 1;
  } else {
    const security::JobToken token = security::read_job_token(env);
    p.job_token = token.secret;
    p.job_token_source = token.source;
    if (auto it = env.find("ACCEL_LISTEN_ADDRESS"); it != env.end()) p.listen_address = it->second;
  }
  return p;
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int default_thread_count(int num_threads_setting, const config::EnvMap& env, int cpus,
                         int local_world_size) {
  if (num_threads_setting > 0) return num_threads_setting;
  if (auto it = env.find("OMP_NUM_THREADS"); it != env.end()) {
    const int n = std::atoi(it->second.c_str());
    if (n > 0) return n;
  }
  return std::max(1, cpus / std::max(1, local_world_size));
}

}  // namespace accel::runtime
