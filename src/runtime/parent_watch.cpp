#include "runtime/parent_watch.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace accel::runtime {

namespace {

// Captured when the library is loaded: if the parent dies between then and accel_init, the
// parent then differs from this one (a reaper adopted us) and the rank must not start. A child
// forked after the load (without exec) captures its own parent again, so it is not mistaken for
// an orphan.
pid_t g_parent_at_load = getppid();

void recapture_parent() {
  g_parent_at_load = getppid();
}

const int g_atfork_registered = pthread_atfork(nullptr, nullptr, recapture_parent);

}  // namespace

std::string launching_engine(const config::EnvMap& env) {
  const std::pair<const char*, const char*> engines[] = {{"ACCEL_STORE_HOSTED", "accel launch"},
                                                         {"TORCHELASTIC_RUN_ID", "torchrun"},
                                                         {"OMPI_COMM_WORLD_RANK", "Open MPI"},
                                                         {"PMI_RANK", "MPICH/Hydra"},
                                                         {"SLURM_STEP_ID", "srun"}};
  for (const auto& [variable, name] : engines)
    if (env.count(variable)) return name;
  return "";
}

std::string die_with_launching_engine(const config::EnvMap& env) {
  std::string engine = launching_engine(env);
  if (engine.empty()) return engine;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != g_parent_at_load) raise(SIGKILL);
  return engine;
}

void die_with_parent_after_fork(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);
}

}  // namespace accel::runtime
