// `accel config`: the questionnaire that writes Accelerate's file, and `show`, `default`, `update`.
// Pure C++ (no LibTorch).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace accel::cli {

struct ConfigCommand {
  CLI::App* command = nullptr;  // the `config` subcommand
  std::function<int()> run;     // runs whichever of its subcommands was parsed
};

// Registers `config` and its subcommands on `app`. run() may throw accel::Error.
ConfigCommand add_config_command(CLI::App& app);

}  // namespace accel::cli
