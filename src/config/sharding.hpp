// Which ZeRO stage a job runs, read from Accelerate's own ways of saying it: `distributed_type:
// FSDP` with `fsdp_config` (FSDP1's fsdp_sharding_strategy, FSDP2's fsdp_reshard_after_forward),
// `distributed_type: DEEPSPEED` with `deepspeed_config.zero_stage`, or the variables Accelerate's
// launcher exports (ACCELERATE_USE_FSDP, FSDP_*, ACCELERATE_USE_DEEPSPEED,
// ACCELERATE_DEEPSPEED_ZERO_STAGE). Every key of those sections is checked: unknown ones, values
// that contradict each other and features libaccel does not have (offload, activation
// checkpointing, a DeepSpeed JSON file) are errors naming the key and where it came from. Pure
// C++ (yaml-cpp for the sections' text), no LibTorch.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace accel::config {

enum class StateDictType { kFull, kSharded };

struct ShardingPlan {
  // 0: every rank holds everything (DDP, FSDP NO_SHARD, ZeRO 0); 1: optimizer state sharded;
  // 2: and gradients; 3: and parameters (FSDP FULL_SHARD).
  int stage = 0;
  // Which of Accelerate's configurations chose it: "FSDP", "DEEPSPEED", or "" (neither), what
  // Accelerate reports as the job's distributed_type.
  std::string family;
  bool hybrid = false;  // HYBRID_SHARD(_ZERO2): shard within a machine, replicate across machines
  StateDictType state_dict = StateDictType::kFull;
  std::string auto_wrap_policy = "NO_WRAP";  // TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP
  std::vector<std::string> wrap_classes;     // fsdp_transformer_layer_cls_to_wrap
  long long min_num_params = 0;              // fsdp_min_num_params
  // Stage 3: gather the next unit while the current one computes, in forward (FSDP1's
  // fsdp_forward_prefetch; FSDP2 and DeepSpeed always) and in backward (fsdp_backward_prefetch
  // other than NO_PREFETCH), where the transport overlaps compute.
  bool forward_prefetch = false;
  bool backward_prefetch = true;
  // Stage 3: a checkpoint loaded after prepare is read by each rank for the parameters it owns
  // alone (fsdp_cpu_ram_efficient_loading); otherwise every rank gathers the whole model and reads
  // the whole checkpoint, as Accelerate loads without it (checkpoint/sharded_load.hpp).
  bool cpu_ram_efficient_loading = false;
  // deepspeed_config.gradient_accumulation_steps where it sets the job's accumulation (nothing set
  // the top-level key: Accelerate's launcher exports it as ACCELERATE_GRADIENT_ACCUMULATION_STEPS);
  // 0 where it does not.
  long long accumulation_steps = 0;
  // What chose the stage, for messages: "fsdp_config.fsdp_sharding_strategy FULL_SHARD (file x)".
  std::string source = "no sharding configured";
};

// Throws accel::Error(config) for a bad or contradictory value, accel::Error(unsupported) for a
// feature libaccel lacks, naming the key and its origin.
ShardingPlan resolve_sharding(const Resolved& settings, const EnvMap& env);

// The stages this build runs; accel::Error(unsupported) naming the plan's source for the others.
void check_sharding_supported(const ShardingPlan& plan);

}  // namespace accel::config
