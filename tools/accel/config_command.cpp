#include "config_command.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <locale>
#include <memory>
#include <sstream>

#include "common/error.hpp"
#include "config/config.hpp"

namespace accel::cli {

namespace {

int run_config_show(const std::string& config_file) {
  const auto env = config::process_environment();
  config::Config cfg;
  if (!config_file.empty())
    cfg.load_file(config_file);
  else
    cfg.load_default_file(env);
  std::fputs(cfg.resolve(env).dump_yaml().c_str(), stdout);
  return 0;
}

// Writes a file Python Accelerate reads as well (only Accelerate's own keys).
int run_config_default(std::string path, const std::string& mixed_precision, int num_processes) {
  const auto env = config::process_environment();
  if (path.empty()) {
    const auto candidates = config::default_file_candidates(env);
    if (candidates.empty()) fail(Errc::io, "no default location: HOME is not set");
    path = candidates.front();
  }
  if (std::ifstream(path)) fail(Errc::io, "'" + path + "' exists already; not overwriting it");
  const auto* spec = config::find_key("mixed_precision");
  const std::string mp =
      config::normalize(*spec, mixed_precision, {config::Source::kSetter, "--mixed_precision"});
  std::ostringstream y;
  y.imbue(std::locale::classic());  // num_processes as 1000, never a locale's 1.000
  y << "compute_environment: LOCAL_MACHINE\n"
    << "debug: false\n"
    << "distributed_type: " << (num_processes > 1 ? "MULTI_CPU" : "'NO'") << "\n"
    << "downcast_bf16: 'no'\n"
    << "machine_rank: 0\n"
    << "main_training_function: main\n"
    << "mixed_precision: " << (mp == "no" ? "'no'" : mp) << "\n"
    << "num_machines: 1\n"
    << "num_processes: " << num_processes << "\n"
    << "rdzv_backend: static\n"
    << "same_network: true\n"
    << "tpu_env: []\n"
    << "tpu_use_cluster: false\n"
    << "tpu_use_sudo: false\n"
    << "use_cpu: true\n";
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    if (std::system(("mkdir -p '" + dir + "'").c_str()) != 0)
      fail(Errc::io, "cannot create directory '" + dir + "'");
  }
  std::ofstream out(path);
  out << y.str();
  if (!out) fail(Errc::io, "cannot write '" + path + "'");
  std::printf("accelerate configuration saved at %s\n", path.c_str());
  return 0;
}

struct ConfigOptions {
  std::string show_file;
  std::string default_file, default_mp = "no";
  int default_np = 1;
};

}  // namespace

ConfigCommand add_config_command(CLI::App& app) {
  auto opts = std::make_shared<ConfigOptions>();
  auto* config = app.add_subcommand("config", "Show or write the configuration");
  config->require_subcommand(1);
  auto* show = config->add_subcommand("show", "Print the effective configuration with sources");
  show->add_option("--config_file,--config-file", opts->show_file, "Configuration file");
  auto* def = config->add_subcommand("default", "Write a default configuration file");
  def->add_option("--config_file,--config-file", opts->default_file, "Where to write it");
  def->add_option("--mixed_precision,--mixed-precision", opts->default_mp, "no, fp16 or bf16");
  def->add_option("--num_processes,--num-processes", opts->default_np, "Processes");
  ConfigCommand out;
  out.command = config;
  out.run = [opts, show, def]() -> int {
    if (show->parsed()) return run_config_show(opts->show_file);
    if (def->parsed())
      return run_config_default(opts->default_file, opts->default_mp, opts->default_np);
    return 2;
  };
  return out;
}

}  // namespace accel::cli
