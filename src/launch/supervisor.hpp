// Starts the local ranks and watches them: fail fast when one fails, forward SIGINT/SIGTERM,
// optionally prefix each line of output with the rank. Pure POSIX: no LibTorch.
#pragma once

#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

namespace accel::launch {

struct RankProcess {
  int rank = 0;                  // global rank, for messages and prefixes
  std::vector<std::string> env;  // full environment, "K=V"
  std::string log_path;          // "" or the file the rank's stdout and stderr are appended to
  int inherit_fd = -1;           // a descriptor the rank keeps across exec (its number is in env)
};

struct SupervisorOptions {
  std::vector<std::string> command;  // program (searched in PATH) and arguments
  // "[rank N] " before every line of stdout and stderr; with log files, the launcher copies each
  // line to the terminal too (torchrun's --tee).
  bool prefix_output = false;
  std::chrono::milliseconds grace{5000};  // between SIGTERM and SIGKILL when stopping ranks
  // How often the loop wakes with nothing to do. Exits and signals wake it at once (signalfd);
  // this bounds only the periodic checks (the kill deadline, the output drain).
  std::chrono::milliseconds monitor_interval{1000};
  bool quiet = false;  // no notes of the launcher's own; failures are still reported
};

struct SuperviseResult {
  int code = 0;              // as supervise() documents
  bool interrupted = false;  // the launcher received SIGINT/SIGTERM/SIGHUP: do not restart
};

// Runs the ranks to completion. Returns 0 when all exit 0; otherwise the exit code of the first
// rank that failed (128 + signal for a rank killed by a signal), after stopping the others, or 128
// + the signal that interrupted the launcher. Messages go to stderr, prefixed "accel launch: ".
// When a rank cannot be started (pipe or fork fails), the ranks already started are killed (their
// process groups) and reaped, every descriptor opened for them is closed, and then it throws
// accel::Error saying which rank and how many were stopped.
// With log paths, a rank's output goes to its file (opened for appending, created 0644), and
// also to the terminal with a prefix when prefix_output is set.
SuperviseResult supervise(const std::vector<RankProcess>& ranks, const SupervisorOptions& options);

// Blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP in the calling thread, so that supervise() receives
// them through its signalfd. Call it before starting any thread (the store's), which inherit the
// mask: a thread that does not block them would swallow SIGCHLD or die of SIGINT. Returns the set.
sigset_t block_supervised_signals();

// The program's path as execve needs it: `name` itself when it contains a '/', else the first
// executable match in PATH. Throws accel::Error(invalid_argument) when there is none.
std::string resolve_program(const std::string& name);

}  // namespace accel::launch
