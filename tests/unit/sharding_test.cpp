// Which ZeRO stage Accelerate's FSDP and DeepSpeed configurations select, and the errors for keys
// that are unknown, contradict each other or ask for what libaccel lacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "config/sharding.hpp"
#include "zero/partition.hpp"

using accel::Errc;
using accel::Error;
using accel::config::Config;
using accel::config::EnvMap;
using accel::config::resolve_sharding;
using accel::config::ShardingPlan;
using accel::config::StateDictType;

namespace {

ShardingPlan plan_of(const std::string& yaml, const EnvMap& env = {}) {
  Config c;
  if (!yaml.empty()) c.load_yaml_text(yaml, "s.yaml");
  return resolve_sharding(c.resolve(env), env);
}

void expect_error(const std::string& yaml, Errc code, std::initializer_list<std::string> parts,
                  const EnvMap& env = {}) {
  try {
    const auto plan = plan_of(yaml, env);
    accel::config::check_sharding_supported(plan);
    ADD_FAILURE() << "no error for:\n" << yaml;
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message lacks '" << p << "': " << e.what();
  }
}

// Accelerate's template examples/config_yaml_templates/fsdp.yaml, as an FSDP1 file.
const char* kFsdpTemplate = R"(compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: BertLayer, BertEmbeddings
  fsdp_use_orig_params: true
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: false
)";

}  // namespace

TEST(Sharding, NothingConfiguredIsStageZero) {
  const auto plan = plan_of("distributed_type: MULTI_CPU\n");
  EXPECT_EQ(plan.stage, 0);
  EXPECT_NO_THROW(accel::config::check_sharding_supported(plan));
}

TEST(Sharding, AccelerateFsdpTemplateIsStageThreeAndSaysWhereItCameFrom) {
  const auto plan = plan_of(kFsdpTemplate);
  EXPECT_EQ(plan.stage, 3);
  EXPECT_FALSE(plan.hybrid);
  EXPECT_EQ(plan.state_dict, StateDictType::kSharded);
  EXPECT_EQ(plan.auto_wrap_policy, "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(plan.wrap_classes, (std::vector<std::string>{"BertLayer", "BertEmbeddings"}));
  EXPECT_EQ(plan.source, "fsdp_config.fsdp_sharding_strategy: FULL_SHARD (file s.yaml:5)");
  EXPECT_NO_THROW(accel::config::check_sharding_supported(plan));
}

TEST(Sharding, Fsdp1StrategiesByNameNumberAndAccelerateConfigsOwnKey) {
  auto stage = [](const std::string& body) {
    return plan_of("distributed_type: FSDP\nfsdp_config:\n" + body);
  };
  EXPECT_EQ(stage("  fsdp_sharding_strategy: NO_SHARD\n").stage, 0);
  EXPECT_EQ(stage("  fsdp_sharding_strategy: shard_grad_op\n").stage, 2);
  EXPECT_EQ(stage("  fsdp_sharding_strategy: 2\n").stage, 2);
  EXPECT_TRUE(stage("  fsdp_sharding_strategy: 5\n").hybrid);
  expect_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 5\n",
               Errc::unsupported, {"hybrid sharding", "HYBRID_SHARD_ZERO2"});
  EXPECT_NO_THROW(accel::config::check_sharding_supported(stage("  fsdp_sharding_strategy: 2\n")));
  EXPECT_EQ(stage("  fsdp_sharding_strategy: HYBRID_SHARD\n").stage, 3);
  // `accelerate config` writes FSDP1's strategy into fsdp_reshard_after_forward.
  EXPECT_EQ(stage("  fsdp_version: 1\n  fsdp_reshard_after_forward: SHARD_GRAD_OP\n").stage, 2);
  // Accelerate's launcher reads a key without the fsdp_ prefix as if it had it.
  EXPECT_EQ(stage("  sharding_strategy: NO_SHARD\n").stage, 0);
  EXPECT_EQ(stage("  fsdp_version: 1\n").stage, 3);
  EXPECT_EQ(stage("  fsdp_version: 1\n").state_dict, StateDictType::kFull);
  expect_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL\n",
               Errc::config, {"fsdp_config.fsdp_sharding_strategy", "'FULL'", "SHARD_GRAD_OP"});
}

TEST(Sharding, Fsdp2SaysReshardAfterForward) {
  const auto off = plan_of(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: "
      "false\n");
  EXPECT_EQ(off.stage, 2);
  EXPECT_EQ(off.state_dict, StateDictType::kSharded);
  EXPECT_EQ(plan_of("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n").stage, 3);
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_sharding_strategy: "
      "FULL_SHARD\n",
      Errc::config, {"fsdp_config.fsdp_sharding_strategy", "FSDP1", "fsdp_reshard_after_forward"});
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_state_dict_type: "
      "LOCAL_STATE_DICT\n",
      Errc::config, {"fsdp_state_dict_type", "LOCAL_STATE_DICT"});
  expect_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n", Errc::config,
               {"fsdp_version", "'3'"});
}

TEST(Sharding, ContradictoryFsdpKeysAreErrorsNamingBoth) {
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_reshard_after_forward: "
      "SHARD_GRAD_OP\n  fsdp_sharding_strategy: FULL_SHARD\n",
      Errc::config, {"FULL_SHARD contradicts", "fsdp_reshard_after_forward: SHARD_GRAD_OP"});
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_reshard_after_forward: "
      "true\n",
      Errc::config, {"fsdp_reshard_after_forward", "FSDP2"});
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n"
      "  fsdp_transformer_layer_cls_to_wrap: Block\n",
      Errc::config, {"fsdp_transformer_layer_cls_to_wrap", "SIZE_BASED_WRAP"});
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_min_num_params: 1000\n",
      Errc::config, {"fsdp_min_num_params", "TRANSFORMER_BASED_WRAP"});
  expect_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_cpu_ram_efficient_loading: true\n"
      "  fsdp_sync_module_states: false\n",
      Errc::config, {"fsdp_sync_module_states", "fsdp_cpu_ram_efficient_loading"});
  expect_error("distributed_type: MULTI_CPU\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n",
               Errc::config, {"fsdp_config", "distributed_type is MULTI_CPU"});
  expect_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_shardng_strategy: NO_SHARD\n",
               Errc::config, {"unknown key", "did you mean fsdp_sharding_strategy"});
}

TEST(Sharding, FeaturesLibaccelLacksAreNamedNotDropped) {
  expect_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n",
               Errc::unsupported, {"fsdp_config.fsdp_offload_params", "s.yaml", "offload"});
  expect_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing: true\n",
               Errc::unsupported, {"fsdp_activation_checkpointing"});
  expect_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: cpu\n",
               Errc::unsupported, {"deepspeed_config.offload_optimizer_device", "cpu"});
  expect_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n",
               Errc::unsupported, {"deepspeed_config_file", "zero_stage"});
  expect_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: 1.0\n",
               Errc::unsupported, {"gradient_clipping", "accel_clip_grad_norm"});
}

TEST(Sharding, DeepSpeedZeroStages) {
  auto zero = [](const std::string& body) {
    return plan_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n" + body);
  };
  const auto one = zero("  zero_stage: 1\n  offload_optimizer_device: none\n");
  EXPECT_EQ(one.stage, 1);
  EXPECT_NO_THROW(accel::config::check_sharding_supported(one));
  EXPECT_EQ(zero("  zero_stage: 0\n").stage, 0);
  EXPECT_EQ(zero("  zero3_init_flag: false\n").stage, 2);  // DeepSpeed's default
  expect_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n", Errc::config,
               {"deepspeed_config.zero_stage", "'4'"});
  expect_error(
      "distributed_type: DEEPSPEED\ngradient_accumulation_steps: 2\ndeepspeed_config:\n"
      "  gradient_accumulation_steps: 4\n",
      Errc::config, {"deepspeed_config.gradient_accumulation_steps", "4 differs", "2"});
  EXPECT_EQ(plan_of("distributed_type: DEEPSPEED\ngradient_accumulation_steps: 2\n"
                    "deepspeed_config:\n  gradient_accumulation_steps: 2\n  zero_stage: 1\n")
                .stage,
            1);
  // Where nothing set the top-level key, the section's value is the job's (as in Accelerate,
  // whose launcher exports it), what `accel config` writes for a DeepSpeed answer.
  EXPECT_EQ(plan_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                    "  gradient_accumulation_steps: 4\n")
                .accumulation_steps,
            4);
  EXPECT_EQ(zero("  zero_stage: 1\n").accumulation_steps, 0);
  expect_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 0\n",
               Errc::config, {"deepspeed_config.gradient_accumulation_steps", "'0'"});
  const auto three = zero("  zero_stage: 3\n");
  EXPECT_EQ(three.stage, 3);
  EXPECT_EQ(three.source, "deepspeed_config.zero_stage: 3 (file s.yaml:2)");
  EXPECT_NO_THROW(accel::config::check_sharding_supported(three));
}

TEST(Sharding, AccelerateLaunchersVariablesSelectTheStage) {
  const EnvMap ds = {{"ACCELERATE_USE_DEEPSPEED", "true"},
                     {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "1"}};
  const auto plan = plan_of("", ds);
  EXPECT_EQ(plan.stage, 1);
  EXPECT_NE(plan.source.find("ACCELERATE_DEEPSPEED_ZERO_STAGE"), std::string::npos) << plan.source;
  // The launcher always exports FSDP_SHARDING_STRATEGY; FSDP2 reads FSDP_RESHARD_AFTER_FORWARD.
  const EnvMap fsdp2 = {{"ACCELERATE_USE_FSDP", "true"},
                        {"FSDP_VERSION", "2"},
                        {"FSDP_SHARDING_STRATEGY", "FULL_SHARD"},
                        {"FSDP_RESHARD_AFTER_FORWARD", "false"}};
  EXPECT_EQ(plan_of("", fsdp2).stage, 2);
  const EnvMap fsdp1 = {{"ACCELERATE_USE_FSDP", "true"},
                        {"FSDP_SHARDING_STRATEGY", "NO_SHARD"},
                        {"FSDP_RESHARD_AFTER_FORWARD", "true"}};
  EXPECT_EQ(plan_of("", fsdp1).stage, 0);
  expect_error("distributed_type: FSDP\n", Errc::config, {"FSDP and DeepSpeed are both chosen"},
               {{"ACCELERATE_USE_DEEPSPEED", "true"}});
}

TEST(ZeroPartition, LargestFirstToTheLeastLoadedRankAsZeroRedundancyOptimizer) {
  using accel::zero::assign_owners;
  // 100 -> 0; 60 -> 1; 50 -> 1 (60 < 100); 40 -> 0 (100 < 110); 10 -> 1 (110 < 140).
  EXPECT_EQ(assign_owners({40, 100, 10, 60, 50}, 2), (std::vector<int>{0, 0, 1, 1, 1}));
  // Ties: the lower index first, the lower rank first.
  EXPECT_EQ(assign_owners({8, 8, 8, 8}, 2), (std::vector<int>{0, 1, 0, 1}));
  // More ranks than parameters: some own nothing.
  EXPECT_EQ(assign_owners({4, 4}, 4), (std::vector<int>{0, 1}));
  EXPECT_TRUE(assign_owners({}, 3).empty());
  // Balanced within one parameter's size on a realistic layer list.
  std::vector<int64_t> sizes;
  for (int layer = 0; layer < 24; ++layer)
    for (int64_t s : {4096LL * 4096 * 4, 4096LL * 4, 4096LL * 16384 * 4, 16384LL * 4})
      sizes.push_back(s);
  for (int world : {2, 3, 4}) {
    const auto owners = assign_owners(sizes, world);
    std::vector<int64_t> load(world, 0);
    for (size_t k = 0; k < sizes.size(); ++k) load[owners[k]] += sizes[k];
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 4096LL * 16384 * 4) << world;
  }
}
