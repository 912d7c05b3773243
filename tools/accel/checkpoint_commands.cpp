#include "checkpoint_commands.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bigmodel/checkpoint_headers.hpp"
#include "bigmodel/estimate.hpp"
#include "checkpoint/merge.hpp"
#include "common/error.hpp"

namespace accel::cli {

namespace {

struct EstimateOptions {
  std::string checkpoint;
  std::vector<std::string> dtypes{"float32", "float16", "int8", "int4"};
  std::string no_split;
  int zero_stage = -1;  // -1: every stage
  int processes = 0;    // 0: no ZeRO table
};

int run_estimate(const EstimateOptions& o) {
  for (const auto& d : o.dtypes)
    if (!bigmodel::known_dtype(d))
      fail(Errc::invalid_argument,
           "--dtypes: '" + d + "' is not one of float32, float16, bfloat16, int8, int4");
  const auto sizes = bigmodel::model_sizes(bigmodel::checkpoint_tensors(o.checkpoint), o.no_split);
  std::printf("%s\n", bigmodel::accelerate_table(sizes, o.dtypes, o.checkpoint).c_str());
  if (o.processes > 0 || o.zero_stage >= 0) {
    std::vector<int> stages{0, 1, 2, 3};
    if (o.zero_stage >= 0) stages = {o.zero_stage};
    std::printf("%s\n",
                bigmodel::zero_table(sizes, stages, o.processes > 0 ? o.processes : 1).c_str());
  }
  return 0;
}

}  // namespace

CheckpointCommand add_estimate_memory_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand(
      "estimate-memory",
      "Memory to load and train a model, from its safetensors headers alone (as `accelerate "
      "estimate-memory`), and per rank under libaccel's ZeRO stages");
  cmd->add_option("checkpoint", o->checkpoint,
                  "A .safetensors file, a sharded model.safetensors.index.json, or a directory "
                  "holding either")
      ->required();
  cmd->add_option("--dtypes", o->dtypes,
                  "float32, float16, bfloat16, int8 and/or int4 (default: float32 float16 int8 "
                  "int4)")
      ->expected(1, -1);
  cmd->add_option(
      "--no-split,--no_split", o->no_split,
      "Regular expression of module names kept whole as one layer (the outermost "
      "match), like Accelerate's no_split_module_classes, e.g. 'encoder\\.layer\\.\\d+'");
  cmd->add_option("--zero-stage,--zero_stage", o->zero_stage,
                  "Show libaccel's per-rank figures for this ZeRO stage only (0-3)")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--num-processes,--num_processes,-n", o->processes,
                  "Show libaccel's per-rank figures of each ZeRO stage on N processes")
      ->check(CLI::Range(1, 1 << 20));
  cmd->footer("Example: accel estimate-memory model.safetensors --dtypes float32 float16 -n 4");
  return {cmd, [o] { return run_estimate(*o); }};
}

CheckpointCommand add_merge_weights_command(CLI::App& app) {
  struct Options {
    std::string dir, out;
    int model = 0;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "merge-weights",
      "Write a save_state directory's model as one model.safetensors (as `accelerate "
      "merge-weights`) that loads at any ZeRO stage and process count");
  cmd->add_option("checkpoint_directory", o->dir, "A directory written by accel_save_state")
      ->required();
  cmd->add_option("output_path", o->out,
                  "A directory (model.safetensors is written in it) or a .safetensors file")
      ->required();
  cmd->add_option("--model", o->model, "Which prepared model of the save (default 0)")
      ->check(CLI::NonNegativeNumber);
  return {cmd, [o] {
            const std::string written = checkpoint::merge_weights(o->dir, o->out, o->model);
            std::printf("Successfully merged weights and saved to %s\n", written.c_str());
            return 0;
          }};
}

}  // namespace accel::cli
