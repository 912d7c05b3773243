// `accel`: the command line. `launch` runs N ranks of any program with the torchrun-compatible
// environment; `env` describes this machine; `config` shows or writes Accelerate's configuration.
#include <dlfcn.h>
#include <sys/utsname.h>
#include <torch/csrc/api/include/torch/version.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <locale>
#include <sstream>

#include "accel/accel.h"
#include "common/error.hpp"
#include "common/parse.hpp"
#include "config/config.hpp"
#include "config_command.hpp"
#include "launch/held_port.hpp"
#include "launch/plan.hpp"
#include "launch/supervisor.hpp"
#include "runtime/process_place.hpp"

namespace {

#define ACCEL_STR2(x) #x
#define ACCEL_STR(x) ACCEL_STR2(x)
const char* const kVersion = ACCEL_STR(ACCEL_VERSION_MAJOR) "." ACCEL_STR(
    ACCEL_VERSION_MINOR) "." ACCEL_STR(ACCEL_VERSION_PATCH);

int run_launch(const accel::launch::LaunchOptions& options, bool prefix_output, double grace_s) {
  const auto env = accel::config::process_environment();
  const auto plan = accel::launch::make_plan(options, env, accel::runtime::available_cpus());
  accel::launch::block_supervised_signals();
  // Rank 0 opens the store on MASTER_PORT; the launcher only picks a free port and holds it for
  // the job, so it starts in milliseconds instead of loading LibTorch to host the store itself.
  std::unique_ptr<accel::launch::HeldPort> held;
  int port = plan.master_port;
  if (plan.pick_port) {
    held = std::make_unique<accel::launch::HeldPort>();
    port = held->port();
  }
  const std::string run_id =
      plan.num_machines > 1 ? "multinode-" + std::to_string(port) : accel::launch::new_run_id();
  std::vector<accel::launch::RankProcess> ranks;
  for (int local = 0; local < plan.local_processes; ++local) {
    accel::launch::RankProcess rp;
    rp.rank = plan.machine_rank * plan.local_processes + local;
    rp.env = accel::launch::rank_environment(plan, local, port, run_id, env);
    ranks.push_back(std::move(rp));
  }
  accel::launch::SupervisorOptions sup;
  sup.command = options.command;
  sup.prefix_output = prefix_output;
  sup.grace = std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
  return accel::launch::supervise(ranks, sup);
}

// The BLAS library LibTorch maps: the libblas.so.3 alternative, loaded here to see which file it
// is (the command line itself does not link LibTorch).
std::string mapped_blas() {
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
  bool prefix_output = false;
  // Read with parse_real, not CLI11's strtold: the number must not depend on the C locale.
  std::string grace_text = "5";
  auto* launch =
      app.add_subcommand("launch", "Run PROGRAM on N local ranks (torchrun environment)");
  launch->add_option("--num_processes,--num-processes,-n", lo.num_processes,
                     "Total number of processes (over all machines)");
  launch->add_option("--num_machines,--num-machines", lo.num_machines, "Number of machines");
  launch->add_option("--machine_rank,--machine-rank", lo.machine_rank,
                     "Rank of this machine (0 hosts the rendezvous)");
  launch->add_option("--main_process_ip,--main-process-ip", lo.main_process_ip,
                     "Address of machine 0");
  launch->add_option("--main_process_port,--main-process-port", lo.main_process_port,
                     "Rendezvous port (default: a free port, single machine)");
  launch->add_option("--config_file,--config-file", lo.config_file,
                     "Accelerate YAML configuration (default: Accelerate's default file)");
  launch->add_option("--mixed_precision,--mixed-precision", lo.mixed_precision, "no, fp16 or bf16");
  launch->add_option("--gradient_accumulation_steps,--gradient-accumulation-steps",
                     lo.gradient_accumulation_steps, "Gradient accumulation steps");
  launch->add_option("--num_cpu_threads_per_process,--num-cpu-threads-per-process",
                     lo.num_cpu_threads_per_process,
                     "Intra-op threads per rank (default: CPUs / local ranks)");
  launch->add_flag("--cpu", lo.cpu, "Run on CPU even where GPUs exist");
  launch->add_flag("--prefix_output,--prefix-output,--tee", prefix_output,
                   "Prefix every output line with [rank N]");
  launch
      ->add_option("--grace_period,--grace-period", grace_text,
                   "Seconds between SIGTERM and SIGKILL when stopping ranks (default 5)")
      ->check(CLI::Validator(
          [](std::string& text) {
            // At most a day: the milliseconds must fit the clock's integer.
            double v = 0;
            return accel::parse_real(text, &v) && v >= 0 && v <= 86400
                       ? std::string()
                       : "'" + text + "' is not a number of seconds from 0 to 86400";
          },
          ""))
      ->type_name("SECONDS");
  launch->prefix_command();
  launch->footer("Example: accel launch -n 2 ./train --epochs 3");

  std::string env_config;
  auto* env = app.add_subcommand("env", "Describe this machine and the configuration in force");
  env->add_option("--config_file,--config-file", env_config, "Configuration file to show");

  const auto config = accel::cli::add_config_command(app);

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
      double grace_s = 5.0;
      accel::parse_real(grace_text, &grace_s);  // checked by the option's validator
      return run_launch(lo, prefix_output, grace_s);
    }
    if (*env) return run_env(env_config);
    if (config.command->parsed()) return config.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel %s: %s\n", app.get_subcommands().front()->get_name().c_str(),
                 e.what());
    return 1;
  }
  return 0;
}
