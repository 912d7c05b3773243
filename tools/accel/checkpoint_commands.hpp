// `accel estimate-memory` (Accelerate's estimate from a checkpoint's headers, and libaccel's ZeRO
// figures per rank) and `accel merge-weights` (one model file from a save_state directory). Pure
// C++ (no LibTorch).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace accel::cli {

struct CheckpointCommand {
  CLI::App* command = nullptr;
  std::function<int()> run;  // may throw accel::Error
};

CheckpointCommand add_estimate_memory_command(CLI::App& app);
CheckpointCommand add_merge_weights_command(CLI::App& app);

}  // namespace accel::cli
