#include "runtime/process_place.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::runtime {

namespace {

// The integer in variable `name`, or `fallback` when it is unset.
long long env_int(const config::EnvMap& env, const char* name, long long fallback, long long min,
                  long long max) {
  auto it = env.find(name);
  if (it == env.end()) return fallback;
  long long v = 0;
  if (!parse_int(it->second, &v) || v < min || v > max)
    fail(Errc::config, "environment variable " + std::string(name) + "='" + it->second +
                           "' is not an integer from " + std::to_string(min) + " to " +
                           std::to_string(max));
  return v;
}

}  // namespace

ProcessPlace read_process_place(const config::EnvMap& env) {
  ProcessPlace p;
  const bool has_world = env.count("WORLD_SIZE") > 0;
  p.world_size = static_cast<int>(env_int(env, "WORLD_SIZE", 1, 1, 1 << 20));
  if (!has_world && env.count("RANK"))
    fail(Errc::config,
         "environment variable RANK is set but WORLD_SIZE is not; set both (as "
         "accel launch and torchrun do) or neither");
  p.rank = static_cast<int>(env_int(env, "RANK", 0, 0, p.world_size - 1));
  if (p.world_size > 1 && !env.count("RANK"))
    fail(Errc::config, "environment variable WORLD_SIZE=" + std::to_string(p.world_size) +
                           " but RANK is not set");
  p.local_world_size =
      static_cast<int>(env_int(env, "LOCAL_WORLD_SIZE", p.world_size, 1, p.world_size));
  p.local_rank =
      static_cast<int>(env_int(env, "LOCAL_RANK", p.world_size == p.local_world_size ? p.rank : 0,
                               0, p.local_world_size - 1));
  if (auto it = env.find("MASTER_ADDR"); it != env.end() && !it->second.empty())
    p.master_addr = it->second;
  p.master_port = static_cast<int>(env_int(env, "MASTER_PORT", 29500, 1, 65535));
  if (auto it = env.find("ACCEL_STORE_HOSTED"); it != env.end()) {
    bool hosted = false;
    if (!config::parse_bool(it->second, &hosted))
      fail(Errc::config,
           "environment variable ACCEL_STORE_HOSTED='" + it->second + "' is not a boolean");
    p.store_hosted = hosted;
  }
  if (auto it = env.find("ACCEL_RUN_ID"); it != env.end()) {
    p.run_id = it->second;
  } else if (auto te = env.find("TORCHELASTIC_RUN_ID"); te != env.end()) {
    p.run_id = te->second;
  } else {
    p.run_id = "default";
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
