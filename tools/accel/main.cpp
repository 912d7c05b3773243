// `accel`: the command line. `launch` runs N ranks of any program with the torchrun-compatible
// environment; `env` describes this machine; `config` shows or writes Accelerate's configuration;
// `estimate-memory` and `merge-weights` work on checkpoints.
#include <dlfcn.h>
#include <signal.h>
#include <sys/utsname.h>
#include <torch/csrc/api/include/torch/version.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <locale>
#include <sstream>

#include "accel/accel.h"
#include "checkpoint_commands.hpp"
#include "common/error.hpp"
#include "common/parse.hpp"
#include "compat/torch_version.hpp"
#include "config/config.hpp"
#include "config_command.hpp"
#include "launch/held_port.hpp"
#include "launch/plan.hpp"
#include "launch/supervisor.hpp"
#include "runtime/process_place.hpp"
#include "security/job_token.hpp"

namespace {

#define ACCEL_STR2(x) #x
#define ACCEL_STR(x) ACCEL_STR2(x)
const char* const kVersion = ACCEL_STR(ACCEL_VERSION_MAJOR) "." ACCEL_STR(
    ACCEL_VERSION_MINOR) "." ACCEL_STR(ACCEL_VERSION_PATCH);

// What `accel launch` does besides planning: output, restarts, the supervisor's timing.
struct LaunchRuntime {
  bool prefix_output = false;
  bool quiet = false;
  double grace_s = 5.0;
  double monitor_interval_s = 1.0;
};

// Whether SIGINT, SIGTERM or SIGHUP arrived for the launcher (they are blocked, so they wait).
bool stop_requested() {
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) != 0) return false;
  return sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) ||
         sigismember(&pending, SIGHUP);
}

// The variables that place a rank, for --debug.
std::string rank_summary(const std::vector<std::string>& env) {
  std::string out;
  for (const char* key : {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=", "GROUP_RANK=",
                          "MASTER_ADDR=", "MASTER_PORT=", "TORCHELASTIC_RESTART_COUNT=",
                          "OMP_NUM_THREADS=", "CUDA_VISIBLE_DEVICES=", "ACCEL_CONFIG_FILE="})
    for (const auto& kv : env)
      if (kv.rfind(key, 0) == 0) out += (out.empty() ? "" : " ") + kv;
  return out;
}

std::string join_command(const std::vector<std::string>& command) {
  std::string out;
  for (const auto& a : command) out += (out.empty() ? "" : " ") + a;
  return out;
}

void note(const LaunchRuntime& rt, const std::string& text) {
  if (!rt.quiet) std::fprintf(stderr, "accel launch: %s\n", text.c_str());
}

// The secret the ranks prove to the store (ACCEL_JOB_TOKEN): the user's or engine's when set; a
// new one for a job on this machine. Machines of a multi-machine job cannot agree on a new one,
// so without the user's token that job's store accepts any libaccel client: said here.
void give_job_token(accel::launch::LaunchPlan& plan, const accel::config::EnvMap& env,
                    const LaunchRuntime& rt) {
  if (plan.world_size < 2 || env.count("ACCEL_JOB_TOKEN") || env.count("ACCEL_JOB_TOKEN_FILE"))
    return;
  if (plan.num_machines == 1) {
    plan.common_env["ACCEL_JOB_TOKEN"] = accel::security::new_job_token();
    return;
  }
  if (plan.machine_rank == 0)
    note(rt,
         "no ACCEL_JOB_TOKEN or ACCEL_JOB_TOKEN_FILE: the job's rendezvous store accepts any "
         "libaccel rank that reaches " +
             plan.master_addr + ":" + std::to_string(plan.master_port) +
             "; set the same secret in ACCEL_JOB_TOKEN on every machine to refuse the rest");
}

int run_launch(const accel::launch::LaunchOptions& options, const LaunchRuntime& rt) {
  const auto env = accel::config::process_environment();
  auto plan = accel::launch::make_plan(options, env, accel::runtime::available_cpus());
  accel::launch::block_supervised_signals();
  give_job_token(plan, env, rt);
  // Rank 0 opens the store on MASTER_PORT; the launcher only picks a free port and holds it for
  // the job, so it starts in milliseconds instead of loading LibTorch to host the store itself.
  // A job on this machine listens on the loopback address only.
  std::unique_ptr<accel::launch::HeldPort> held;
  int port = plan.master_port;
  if (plan.pick_port) {
    auto listen = env.find("ACCEL_LISTEN_ADDRESS");
    held = std::make_unique<accel::launch::HeldPort>(listen != env.end() ? listen->second
                                                                         : "127.0.0.1");
    port = held->port();
  }
  const std::string run_id =
      plan.num_machines > 1 ? "multinode-" + std::to_string(port) : accel::launch::new_run_id();
  if (!plan.log_dir.empty()) {
    if (std::system(("mkdir -p -- '" + plan.log_dir + "'").c_str()) != 0)
      accel::fail(accel::Errc::io, "--log_dir: cannot create directory '" + plan.log_dir + "'");
    note(rt, "each rank's output goes to " + plan.log_dir + "/rank_<N>.log");
  }
  if (!plan.machines_from.empty())
    note(rt, "machine " + std::to_string(plan.machine_rank) + " of " +
                 std::to_string(plan.num_machines) + ", from " + plan.machines_from);
  accel::launch::SupervisorOptions sup;
  sup.command = options.command;
  sup.prefix_output = rt.prefix_output;
  sup.quiet = rt.quiet;
  sup.grace = std::chrono::milliseconds(static_cast<long long>(rt.grace_s * 1000));
  sup.monitor_interval =
      std::chrono::milliseconds(static_cast<long long>(rt.monitor_interval_s * 1000));
  for (int attempt = 0;; ++attempt) {
    std::vector<accel::launch::RankProcess> ranks;
    for (int local = 0; local < plan.local_processes; ++local) {
      accel::launch::RankProcess rp;
      rp.rank = plan.machine_rank * plan.local_processes + local;
      rp.env = accel::launch::rank_environment(plan, local, port, run_id, env, attempt);
      if (!plan.log_dir.empty())
        rp.log_path = plan.log_dir + "/rank_" + std::to_string(rp.rank) + ".log";
      // Rank 0's store serves on the socket held here, so the port is never free between the
      // launcher's pick and rank 0's listen.
      if (held && rp.rank == 0) {
        rp.inherit_fd = held->fd();
        rp.env.push_back("ACCEL_STORE_FD=" + std::to_string(held->fd()));
      }
      if (options.debug)
        note(rt, "attempt " + std::to_string(attempt) + ", rank " + std::to_string(rp.rank) + ": " +
                     rank_summary(rp.env) + " " + join_command(options.command));
      ranks.push_back(std::move(rp));
    }
    const auto result = accel::launch::supervise(ranks, sup);
    if (result.code == 0 || result.interrupted || stop_requested()) return result.code;
    if (attempt >= plan.max_restarts) {
      if (plan.max_restarts > 0)
        std::fprintf(stderr, "accel launch: giving up after %d restart%s (--max_restarts)\n",
                     attempt, attempt == 1 ? "" : "s");
      return result.code;
    }
    // As torchrun: every rank of the attempt was stopped; all start again, with the next
    // TORCHELASTIC_RESTART_COUNT, and resume from their last checkpoint if they saved one.
    note(rt, "restarting all " + std::to_string(plan.local_processes) + " rank" +
                 (plan.local_processes > 1 ? "s" : "") + " (restart " +
                 std::to_string(attempt + 1) + " of " + std::to_string(plan.max_restarts) + ")");
  }
}

// `accel test`: accel-selftest sits beside this binary in a build tree, in libexec once installed.
std::string selftest_program() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) accel::fail(accel::Errc::io, "cannot find this program's own path");
  self[n] = '\0';
  const std::string dir = std::string(self).substr(0, std::string(self).rfind('/'));
  for (const std::string& candidate :
       {dir + "/accel-selftest", dir + "/../" ACCEL_LIBEXEC_DIR "/accel/accel-selftest"})
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  accel::fail(accel::Errc::io, "accel-selftest is not installed next to " + std::string(self) +
                                   " nor in ../" ACCEL_LIBEXEC_DIR "/accel");
}

// As `accelerate test`: runs the self-test on the processes the configuration describes.
int run_test(accel::launch::LaunchOptions lo, const LaunchRuntime& rt) {
  lo.command = {selftest_program()};
  char dir_template[] = "/tmp/accel-test-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) accel::fail(accel::Errc::io, std::string("mkdtemp: ") + std::strerror(errno));
  setenv("ACCEL_TEST_DIR", (std::string(dir) + "/checkpoint").c_str(), 1);
  int code = 1;
  try {
    code = run_launch(lo, rt);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    throw;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (code == 0)
    std::printf("Test is a success! You are ready for your distributed training!\n");
  else
    std::fprintf(stderr, "accel test: failed (exit status %d); see the checks above\n", code);
  return code;
}

// torchrun's option names (as Kubernetes sets them, PET_NNODES, ...) fill Accelerate's; both given
// must agree.
void merge_torchrun_spellings(accel::launch::LaunchOptions& lo,
                              const std::optional<std::string>& nnodes,
                              const std::optional<int>& node_rank,
                              const std::optional<std::string>& master_addr,
                              const std::optional<int>& master_port) {
  auto merge = [](auto& ours, const auto& theirs, const char* our_flag, const char* their_flag) {
    if (!theirs) return;
    if (ours && *ours != *theirs) {
      std::ostringstream msg;
      msg.imbue(std::locale::classic());
      msg << "two launch options disagree: " << our_flag << " " << *ours << " but " << their_flag
          << " " << *theirs << " (from the command line or PET_ variables)";
      accel::fail(accel::Errc::invalid_argument, msg.str());
    }
    ours = theirs;
  };
  if (nnodes) {
    // torchrun's elastic "MIN:MAX" form: only a fixed size is supported.
    std::string text = *nnodes;
    const auto colon = text.find(':');
    if (colon != std::string::npos) {
      if (text.substr(0, colon) != text.substr(colon + 1))
        accel::fail(accel::Errc::unsupported,
                    "--nnodes " + text +
                        ": accel launch runs a fixed number of machines; a range MIN:MAX needs "
                        "torchrun's elastic rendezvous (libaccel programs run under torchrun)");
      text = text.substr(0, colon);
    }
    long long n = 0;
    if (!accel::parse_int(text, &n) || n < 1 || n > (1 << 20))
      accel::fail(accel::Errc::invalid_argument,
                  "--nnodes '" + *nnodes + "' is not a positive count");
    merge(lo.num_machines, std::optional<int>(static_cast<int>(n)), "--num_machines", "--nnodes");
  }
  merge(lo.machine_rank, node_rank, "--machine_rank", "--node_rank");
  merge(lo.main_process_ip, master_addr, "--main_process_ip", "--master_addr");
  merge(lo.main_process_port, master_port, "--main_process_port", "--master_port");
}

// The BLAS library LibTorch maps: the libblas.so.3 alternative, loaded here to see which file it
// is (the command line itself does not link LibTorch). The PyPI wheels carry MKL inside.
std::string mapped_blas() {
  if (!ACCEL_TORCH_SYSTEM_BLAS)
    return "built into LibTorch (its libtorch_cpu.so loads no libblas.so.3)";
  if (!dlopen("libblas.so.3", RTLD_LAZY | RTLD_LOCAL)) return "none (libblas.so.3 not found)";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libblas") != std::string::npos || path.find("libopenblas") != std::string::npos)
      return path;
  }
  return "none mapped";
}

int run_env(const std::string& config_file) {
  utsname u{};
  uname(&u);
  std::printf("- libaccel version: %s\n", kVersion);
  std::printf("- Platform: %s %s %s\n", u.sysname, u.release, u.machine);
  std::printf("- LibTorch version: %d.%d.%d\n", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
              TORCH_VERSION_PATCH);
  std::printf("- CPUs available: %d\n", accel::runtime::available_cpus());
  std::printf("- BLAS: %s\n", mapped_blas().c_str());
  const auto env = accel::config::process_environment();
  std::printf("- Intra-op threads per rank: %d alone, %d each with 2 local ranks\n",
              accel::runtime::default_thread_count(0, env, accel::runtime::available_cpus(), 1),
              accel::runtime::default_thread_count(0, env, accel::runtime::available_cpus(), 2));
  accel::config::Config cfg;
  std::string path = config_file;
  if (!path.empty())
    cfg.load_file(path);
  else
    path = cfg.load_default_file(env);
  std::printf("- Config file: %s\n", path.empty() ? "Not found" : path.c_str());
  std::printf("- Effective configuration:\n");
  std::istringstream dump(cfg.resolve(env).dump_yaml());
  for (std::string line; std::getline(dump, line);) std::printf("\t%s\n", line.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accel: run libaccel training programs on one or many processes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kVersion));

  accel::launch::LaunchOptions lo;
  LaunchRuntime rt;
  // Read with parse_real, not CLI11's strtold: the number must not depend on the C locale.
  std::string grace_text = "5", monitor_text = "1";
  // torchrun's spellings, which Kubernetes operators set as PET_NNODES, PET_NODE_RANK, ...
  std::optional<std::string> nnodes, master_addr;
  std::optional<int> node_rank, master_port;
  auto* launch =
      app.add_subcommand("launch", "Run PROGRAM on N local ranks (torchrun environment)");
  // Every option is also read from PET_<OPTION> when the command line does not give it, as
  // torchrun does: Kubeflow's PyTorchJob and Trainer pass a job's shape only that way.
  auto pet = [](CLI::Option* opt) {
    std::string name = opt->get_single_name();
    for (auto& ch : name) ch = ch == '-' ? '_' : static_cast<char>(std::toupper(ch));
    opt->envname("PET_" + name);
    return opt;
  };
  auto seconds = [](double max) {
    return CLI::Validator(
        [max](std::string& text) {
          double v = 0;
          return accel::parse_real(text, &v) && v >= 0 && v <= max
                     ? std::string()
                     : "'" + text + "' is not a number of seconds from 0 to " +
                           accel::format_real(max);
        },
        "");
  };
  pet(launch->add_option("--num_processes,--num-processes,-n", lo.num_processes,
                         "Total number of processes (over all machines)"));
  pet(launch->add_option("--num_machines,--num-machines", lo.num_machines, "Number of machines"));
  pet(launch->add_option("--machine_rank,--machine-rank", lo.machine_rank,
                         "Rank of this machine (0 hosts the rendezvous)"));
  pet(launch->add_option("--main_process_ip,--main-process-ip", lo.main_process_ip,
                         "Address of machine 0"));
  pet(launch->add_option("--main_process_port,--main-process-port", lo.main_process_port,
                         "Rendezvous port (default: a free port, single machine)"));
  pet(launch->add_option("--nproc_per_node,--nproc-per-node", lo.nproc_per_node,
                         "Processes per machine (torchrun's spelling; instead of -n)"));
  pet(launch->add_option("--nnodes", nnodes, "Number of machines (torchrun's spelling: N or N:N)"));
  pet(launch->add_option("--node_rank,--node-rank", node_rank,
                         "Rank of this machine (torchrun's spelling)"));
  pet(launch->add_option("--master_addr,--master-addr", master_addr,
                         "Address of machine 0 (torchrun's spelling)"));
  pet(launch->add_option("--master_port,--master-port", master_port,
                         "Rendezvous port (torchrun's spelling)"));
  pet(launch->add_option("--config_file,--config-file", lo.config_file,
                         "Accelerate YAML configuration (default: Accelerate's default file)"));
  pet(launch->add_option("--mixed_precision,--mixed-precision", lo.mixed_precision,
                         "no, fp16 or bf16"));
  pet(launch->add_option("--gradient_accumulation_steps,--gradient-accumulation-steps",
                         lo.gradient_accumulation_steps, "Gradient accumulation steps"));
  pet(launch->add_option("--num_cpu_threads_per_process,--num-cpu-threads-per-process",
                         lo.num_cpu_threads_per_process,
                         "Intra-op threads per rank (default: CPUs / local ranks)"));
  pet(launch->add_option(
      "--gpu_ids,--gpu-ids", lo.gpu_ids,
      "GPUs the ranks may use: 'all' or a list like 0,1 (CUDA_VISIBLE_DEVICES)"));
  pet(launch->add_option("--max_restarts,--max-restarts", lo.max_restarts,
                         "Restart all ranks up to N times when one fails (default 0)"));
  pet(launch->add_option("--log_dir,--log-dir", lo.log_dir,
                         "Write each rank's output to DIR/rank_<N>.log (with --tee: also here)"));
  pet(launch->add_flag("--cpu", lo.cpu, "Run on CPU even where GPUs exist"));
  pet(launch->add_flag("--debug", lo.debug,
                       "Debug mode: ACCELERATE_DEBUG_MODE=true for the ranks (libaccel always "
                       "checks collectives' shapes) and each rank's placement printed here"));
  pet(launch->add_flag("-q,--quiet", rt.quiet,
                       "Print nothing of the launcher's own except failures"));
  pet(launch->add_flag("--prefix_output,--prefix-output,--tee", rt.prefix_output,
                       "Prefix every output line with [rank N]"));
  // At most a day: the milliseconds must fit the clock's integer.
  pet(launch->add_option("--grace_period,--grace-period", grace_text,
                         "Seconds between SIGTERM and SIGKILL when stopping ranks (default 5)"))
      ->check(seconds(86400))
      ->type_name("SECONDS");
  pet(launch->add_option("--monitor_interval,--monitor-interval", monitor_text,
                         "Seconds between the launcher's periodic checks (default 1; exits and "
                         "signals are seen at once)"))
      ->check(seconds(3600))
      ->type_name("SECONDS");
  launch->prefix_command();
  launch->footer("Example: accel launch -n 2 ./train --epochs 3");

  accel::launch::LaunchOptions test_options;
  auto* test = app.add_subcommand(
      "test", "Check the configured setup end to end: collectives, training, checkpoints");
  test->add_option("--config_file,--config-file", test_options.config_file,
                   "Configuration to test (default: Accelerate's default file)");
  test->add_option("--num_processes,--num-processes,-n", test_options.num_processes,
                   "Processes (default: the configuration's)");

  std::string env_config;
  auto* env = app.add_subcommand("env", "Describe this machine and the configuration in force");
  env->add_option("--config_file,--config-file", env_config, "Configuration file to show");

  const auto config = accel::cli::add_config_command(app);
  const auto estimate = accel::cli::add_estimate_memory_command(app);
  const auto merge = accel::cli::add_merge_weights_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*launch) {
      lo.command = launch->remaining();
      if (lo.command.empty()) {
        std::fprintf(stderr, "accel launch: no program given\n%s", launch->help().c_str());
        return 2;
      }
      accel::parse_real(grace_text, &rt.grace_s);  // checked by the options' validators
      accel::parse_real(monitor_text, &rt.monitor_interval_s);
      rt.monitor_interval_s = std::max(rt.monitor_interval_s, 0.001);
      merge_torchrun_spellings(lo, nnodes, node_rank, master_addr, master_port);
      return run_launch(lo, rt);
    }
    if (*test) return run_test(test_options, LaunchRuntime{});
    if (*env) return run_env(env_config);
    if (config.command->parsed()) return config.run();
    if (estimate.command->parsed()) return estimate.run();
    if (merge.command->parsed()) return merge.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel %s: %s\n", app.get_subcommands().front()->get_name().c_str(),
                 e.what());
    return 1;
  }
  return 0;
}
