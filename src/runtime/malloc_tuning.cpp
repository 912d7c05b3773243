#include "runtime/malloc_tuning.hpp"

#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace accel::runtime {

bool malloc_thresholds_set_by_user(const config::EnvMap& env) {
  if (env.count("MALLOC_MMAP_THRESHOLD_") || env.count("MALLOC_TRIM_THRESHOLD_")) return true;
  const auto tunables = env.find("GLIBC_TUNABLES");
  return tunables != env.end() && (tunables->second.find("mmap_threshold") != std::string::npos ||
                                   tunables->second.find("trim_threshold") != std::string::npos);
}

std::string tune_malloc(const config::EnvMap& env) {
#if defined(__GLIBC__)
  if (malloc_thresholds_set_by_user(env)) return "left as the environment sets it";
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kTensorMmapThreshold)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTensorTrimThreshold)) == 1;
  });
  return ok ? "mmap threshold 32 MiB, trim threshold 64 MiB" : "mallopt refused; unchanged";
#else
  (void)env;
  return "not glibc; unchanged";
#endif
}

}  // namespace accel::runtime
