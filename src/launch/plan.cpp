#include "launch/plan.hpp"

#include <algorithm>
#include <random>

#include "common/error.hpp"

namespace accel::launch {

namespace {

void put_int(std::map<std::string, std::string>& env, const char* name, long long v) {
  env[name] = std::to_string(v);
}

}  // namespace

LaunchPlan make_plan(const LaunchOptions& o, const config::EnvMap& env, int cpus) {
  if (o.command.empty()) fail(Errc::invalid_argument, "no program to launch");

  // As Accelerate: --config_file, else the default file when it exists (unless --cpu without a
  // file).
  config::Config file;
  std::string path;
  if (o.config_file) {
    file.load_file(*o.config_file);
    path = *o.config_file;
  } else if (!o.cpu) {
    path = file.load_default_file(env);
  }
  const config::Resolved from_file = file.resolve({});  // the file over defaults, no environment
  auto file_int = [&](const char* key) { return static_cast<int>(from_file.integer(key)); };
  auto file_sets = [&](const char* key) {
    return from_file.at(key).origin.source == config::Source::kFile;
  };

  LaunchPlan plan;
  plan.config_file = path;
  plan.num_machines = o.num_machines.value_or(file_int("num_machines"));
  plan.machine_rank = o.machine_rank.value_or(file_int("machine_rank"));
  if (plan.num_machines < 1) fail(Errc::invalid_argument, "--num_machines must be at least 1");
  if (plan.machine_rank < 0 || plan.machine_rank >= plan.num_machines)
    fail(Errc::invalid_argument, "--machine_rank " + std::to_string(plan.machine_rank) +
                                     " is not in 0.." + std::to_string(plan.num_machines - 1));

  int total = 1;
  if (o.num_processes) {
    total = *o.num_processes;
  } else if (file_sets("num_processes")) {
    total = file_int("num_processes");
    if (total == -1)
      fail(Errc::invalid_argument, "num_processes is -1 in " + path +
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

  const std::string ip = o.main_process_ip.value_or(
      file_sets("main_process_ip") ? from_file.text("main_process_ip") : std::string());
  const int port = o.main_process_port.value_or(file_int("main_process_port"));
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

  if (o.num_cpu_threads_per_process) {
    if (*o.num_cpu_threads_per_process < 1)
      fail(Errc::invalid_argument, "--num_cpu_threads_per_process must be at least 1");
    plan.threads_per_process = *o.num_cpu_threads_per_process;
  } else {
    plan.threads_per_process = std::max(1, cpus / plan.local_processes);
  }

  auto& ce = plan.common_env;
  if (!path.empty()) ce["ACCEL_CONFIG_FILE"] = path;
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
  return plan;
}

std::vector<std::string> rank_environment(const LaunchPlan& plan, int local_rank, int port,
                                          const std::string& run_id, const config::EnvMap& base) {
  config::EnvMap env = base;
  for (const auto& [k, v] : plan.common_env) env[k] = v;
  put_int(env, "RANK",
          static_cast<long long>(plan.machine_rank) * plan.local_processes + local_rank);
  put_int(env, "LOCAL_RANK", local_rank);
  put_int(env, "WORLD_SIZE", plan.world_size);
  put_int(env, "LOCAL_WORLD_SIZE", plan.local_processes);
  put_int(env, "GROUP_RANK", plan.machine_rank);
  if (plan.world_size > 1) {
    env["MASTER_ADDR"] = plan.master_addr;
    put_int(env, "MASTER_PORT", port);
    // Rank 0 hosts the store at MASTER_PORT, as under torchrun's environment contract, so PyTorch
    // programs run under `accel launch` too.
    env.erase("ACCEL_STORE_HOSTED");
    env["ACCEL_RUN_ID"] = run_id;
  } else {
    for (const char* k : {"MASTER_ADDR", "MASTER_PORT", "ACCEL_STORE_HOSTED", "ACCEL_RUN_ID"})
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
