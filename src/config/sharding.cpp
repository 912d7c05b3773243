#include "config/sharding.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::config {

namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// One section (fsdp_config or deepspeed_config) as key -> scalar text, with where it came from.
struct Section {
  std::string name;
  std::string origin;
  std::map<std::string, std::string> values;

  bool has(const std::string& key) const { return values.count(key) > 0; }
  const std::string& at(const std::string& key) const { return values.at(key); }
  std::string where(const std::string& key) const { return name + "." + key + " (" + origin + ")"; }
  // "fsdp_config.fsdp_version: 2 (file x.yaml:3)"
  std::string said(const std::string& key, const std::string& value) const {
    return name + "." + key + ": " + value + " (" + origin + ")";
  }
  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    fail(Errc::config, where(key) + ": " + why);
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const {
    fail(Errc::unsupported, where(key) + ": " + why);
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    bool on = false;
    if (!parse_bool(at(key), &on)) bad(key, "'" + at(key) + "' is not a boolean (true or false)");
    return on;
  }
};

Section read_section(const Resolved& settings, const std::string& key, const char* prefix) {
  Section s;
  s.name = key;
  s.origin = settings.at(key).origin.describe();
  YAML::Node node;
  try {
    node = YAML::Load(settings.text(key));
  } catch (const YAML::Exception& e) {
    fail(Errc::config, key + " (" + s.origin + ") is not a YAML mapping: " + e.what());
  }
  if (!node.IsMap()) {
    if (node.IsNull()) return s;
    fail(Errc::config, key + " (" + s.origin + ") is not a mapping of keys to values");
  }
  for (const auto& kv : node) {
    std::string k = kv.first.as<std::string>();
    // Accelerate's launcher reads fsdp_config's keys with "fsdp_" put in front when missing.
    if (prefix && k.rfind(prefix, 0) != 0) k = prefix + k;
    if (!kv.second.IsScalar() && !kv.second.IsNull())
      s.bad(k, "expected a single value, not a list or mapping");
    s.values[k] = kv.second.IsNull() ? "" : kv.second.Scalar();
  }
  return s;
}

void reject_unknown(const Section& s, const std::vector<std::string>& known) {
  for (const auto& [k, v] : s.values)
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string closest;
      size_t best = 4;
      for (const auto& candidate : known)
        if (edit_distance(k, candidate) < best)
          best = edit_distance(k, candidate), closest = candidate;
      std::string list;
      for (const auto& candidate : known) list += (list.empty() ? "" : ", ") + candidate;
      s.bad(k, "unknown key" + (closest.empty() ? "" : " (did you mean " + closest + "?)") +
                   "; known: " + list);
    }
}

// FSDP's sharding strategies in Accelerate's order (its numbers 1..5 are these).
const std::vector<std::string> kStrategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                              "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};

std::string strategy_of(const Section& s, const std::string& key) {
  const std::string v = upper(s.at(key));
  long long n = 0;
  if (parse_int(v, &n) && n >= 1 && n <= 5) return kStrategies[static_cast<size_t>(n - 1)];
  if (std::find(kStrategies.begin(), kStrategies.end(), v) != kStrategies.end()) return v;
  s.bad(key, "'" + s.at(key) +
                 "' is not a sharding strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                 "HYBRID_SHARD, HYBRID_SHARD_ZERO2 (or 1..5)");
}

void apply_strategy(const std::string& strategy, ShardingPlan* plan) {
  plan->stage = strategy == "NO_SHARD"                                            ? 0
                : strategy == "SHARD_GRAD_OP" || strategy == "HYBRID_SHARD_ZERO2" ? 2
                                                                                  : 3;
  plan->hybrid = strategy.rfind("HYBRID", 0) == 0;
}

const std::vector<std::string> kFsdpKeys = {
    "fsdp_version",
    "fsdp_sharding_strategy",
    "fsdp_reshard_after_forward",
    "fsdp_state_dict_type",
    "fsdp_auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_min_num_params",
    "fsdp_backward_prefetch",
    "fsdp_backward_prefetch_policy",
    "fsdp_forward_prefetch",
    "fsdp_offload_params",
    "fsdp_use_orig_params",
    "fsdp_cpu_ram_efficient_loading",
    "fsdp_sync_module_states",
    "fsdp_activation_checkpointing",
    "fsdp_ignored_modules",
};

// FSDP1 names the strategy (fsdp_sharding_strategy, or the same words in
// fsdp_reshard_after_forward, as `accelerate config` writes them); FSDP2 says true or false.
void fsdp_stage(const Section& s, int version, ShardingPlan* plan) {
  if (version == 2) {
    if (s.has("fsdp_sharding_strategy"))
      s.bad("fsdp_sharding_strategy",
            "an FSDP1 key; with fsdp_version 2 write fsdp_reshard_after_forward: true "
            "(FULL_SHARD) or false (SHARD_GRAD_OP)");
    const bool reshard = s.flag("fsdp_reshard_after_forward", true);
    plan->stage = reshard ? 3 : 2;
    plan->source = s.has("fsdp_reshard_after_forward")
                       ? s.said("fsdp_reshard_after_forward", reshard ? "true" : "false")
                       : s.name + " with fsdp_version 2 (" + s.origin + "), resharding by default";
    return;
  }
  std::string strategy = "FULL_SHARD", key;
  if (s.has("fsdp_reshard_after_forward")) {
    bool on = false;
    if (parse_bool(s.at("fsdp_reshard_after_forward"), &on))
      s.bad("fsdp_reshard_after_forward",
            "a boolean is FSDP2's form; with fsdp_version 1 name a sharding strategy "
            "(FULL_SHARD, SHARD_GRAD_OP, ...), or set fsdp_version: 2");
    strategy = strategy_of(s, key = "fsdp_reshard_after_forward");
  }
  if (s.has("fsdp_sharding_strategy")) {
    const std::string named = strategy_of(s, "fsdp_sharding_strategy");
    if (!key.empty() && named != strategy)
      s.bad("fsdp_sharding_strategy", named + " contradicts " + s.said(key, strategy));
    strategy = named;
    key = "fsdp_sharding_strategy";
  }
  apply_strategy(strategy, plan);
  plan->source =
      key.empty() ? s.name + " (" + s.origin + "), FULL_SHARD by default" : s.said(key, strategy);
}

void fsdp_wrap(const Section& s, ShardingPlan* plan) {
  if (s.has("fsdp_auto_wrap_policy")) {
    const std::string p = upper(s.at("fsdp_auto_wrap_policy"));
    if (p != "TRANSFORMER_BASED_WRAP" && p != "SIZE_BASED_WRAP" && p != "NO_WRAP")
      s.bad("fsdp_auto_wrap_policy", "'" + s.at("fsdp_auto_wrap_policy") +
                                         "' is not TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or "
                                         "NO_WRAP");
    plan->auto_wrap_policy = p;
  }
  if (s.has("fsdp_transformer_layer_cls_to_wrap")) {
    if (plan->auto_wrap_policy != "TRANSFORMER_BASED_WRAP")
      s.bad("fsdp_transformer_layer_cls_to_wrap",
            "names layers to wrap but fsdp_auto_wrap_policy is " + plan->auto_wrap_policy +
                ", not TRANSFORMER_BASED_WRAP");
    std::string item;
    for (char c : s.at("fsdp_transformer_layer_cls_to_wrap") + ",") {
      if (c != ',') {
        if (!std::isspace(static_cast<unsigned char>(c))) item += c;
      } else if (!item.empty()) {
        plan->wrap_classes.push_back(item);
        item.clear();
      }
    }
  }
  if (s.has("fsdp_min_num_params")) {
    if (!parse_int(s.at("fsdp_min_num_params"), &plan->min_num_params) || plan->min_num_params < 0)
      s.bad("fsdp_min_num_params",
            "'" + s.at("fsdp_min_num_params") + "' is not a non-negative integer");
    if (plan->auto_wrap_policy != "SIZE_BASED_WRAP")
      s.bad("fsdp_min_num_params", "sets a size but fsdp_auto_wrap_policy is " +
                                       plan->auto_wrap_policy + ", not SIZE_BASED_WRAP");
  }
}

void fsdp_features(const Section& s, int version, ShardingPlan* plan) {
  if (s.flag("fsdp_offload_params", false))
    s.unsupported("fsdp_offload_params",
                  "CPU offload is not supported by libaccel (on a CPU run the parameters are in "
                  "host memory already); set it to false");
  if (s.flag("fsdp_activation_checkpointing", false))
    s.unsupported("fsdp_activation_checkpointing",
                  "activation checkpointing is not supported by libaccel; set it to false");
  if (s.has("fsdp_ignored_modules") && !s.at("fsdp_ignored_modules").empty())
    s.unsupported("fsdp_ignored_modules", "ignored modules are not supported by libaccel");
  plan->cpu_ram_efficient_loading = s.flag("fsdp_cpu_ram_efficient_loading", false);
  if (plan->cpu_ram_efficient_loading && !s.flag("fsdp_sync_module_states", true))
    s.bad("fsdp_sync_module_states",
          "false contradicts fsdp_cpu_ram_efficient_loading: true (the ranks without the "
          "weights need them synchronised, as Accelerate requires)");
  (void)s.flag("fsdp_use_orig_params", false);
  plan->forward_prefetch = s.flag("fsdp_forward_prefetch", false);
  if (version == 2 && plan->forward_prefetch)
    s.bad("fsdp_forward_prefetch", "not part of FSDP2 (Accelerate refuses it there too)");
  if (version == 2) plan->forward_prefetch = true;  // FSDP2 prefetches the next all-gather
  for (const char* k : {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"}) {
    if (!s.has(k)) continue;
    const std::string p = upper(s.at(k));
    if (p != "BACKWARD_PRE" && p != "BACKWARD_POST" && p != "NO_PREFETCH" && p != "1" && p != "2")
      s.bad(k, "'" + s.at(k) + "' is not BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH");
    plan->backward_prefetch = p != "NO_PREFETCH";
  }
}

ShardingPlan from_fsdp(const Section& s) {
  reject_unknown(s, kFsdpKeys);
  ShardingPlan plan;
  plan.family = "FSDP";
  int version = 1;
  if (s.has("fsdp_version")) {
    const std::string v = s.at("fsdp_version");
    if (v != "1" && v != "2") s.bad("fsdp_version", "'" + v + "' is not 1 or 2");
    version = v == "2" ? 2 : 1;
  }
  fsdp_stage(s, version, &plan);
  plan.state_dict = version == 2 ? StateDictType::kSharded : StateDictType::kFull;
  if (s.has("fsdp_state_dict_type")) {
    const std::string t = upper(s.at("fsdp_state_dict_type"));
    if (t == "FULL_STATE_DICT")
      plan.state_dict = StateDictType::kFull;
    else if (t == "SHARDED_STATE_DICT" || (t == "LOCAL_STATE_DICT" && version == 1))
      plan.state_dict = StateDictType::kSharded;  // LOCAL: each rank's own shard, as SHARDED
    else
      s.bad("fsdp_state_dict_type",
            "'" + s.at("fsdp_state_dict_type") + "' is not " +
                (version == 2 ? "FULL_STATE_DICT or SHARDED_STATE_DICT (FSDP2 has no "
                                "LOCAL_STATE_DICT)"
                              : "FULL_STATE_DICT, SHARDED_STATE_DICT or LOCAL_STATE_DICT"));
  }
  fsdp_wrap(s, &plan);
  fsdp_features(s, version, &plan);
  return plan;
}

const std::vector<std::string> kDeepSpeedKeys = {
    "zero_stage",
    "deepspeed_config_file",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero3_init_flag",
    "zero3_save_16bit_model",
    "deepspeed_moe_layer_cls_names",
    "deepspeed_multinode_launcher",
    "deepspeed_hostfile",
    "deepspeed_exclusion_filter",
    "deepspeed_inclusion_filter",
};

ShardingPlan from_deepspeed(const Section& s, const Resolved& settings) {
  reject_unknown(s, kDeepSpeedKeys);
  if (s.has("deepspeed_config_file") && !s.at("deepspeed_config_file").empty() &&
      s.at("deepspeed_config_file") != "none")
    s.unsupported("deepspeed_config_file",
                  "DeepSpeed's JSON files are not read by libaccel; write zero_stage in "
                  "deepspeed_config instead");
  for (const char* k : {"offload_optimizer_device", "offload_param_device"})
    if (s.has(k) && !s.at(k).empty() && upper(s.at(k)) != "NONE")
      s.unsupported(k, "offload to " + s.at(k) + " is not supported by libaccel; set it to none");
  long long accumulation_steps = 0;
  if (s.has("gradient_accumulation_steps")) {
    const std::string& value = s.at("gradient_accumulation_steps");
    long long n = 0;
    if (!parse_int(value, &n) || n < 1)
      s.bad("gradient_accumulation_steps", "'" + value + "' is not a positive integer");
    const Setting& top = settings.at("gradient_accumulation_steps");
    if (top.origin.source == Source::kDefault)
      accumulation_steps = n;  // as in Accelerate, the section's value is the job's
    else if (value != settings.text("gradient_accumulation_steps"))
      s.bad("gradient_accumulation_steps", value + " differs from gradient_accumulation_steps " +
                                               settings.text("gradient_accumulation_steps") + " (" +
                                               top.origin.describe() +
                                               "): make them agree or drop one");
  }
  if (s.has("gradient_clipping") && !s.at("gradient_clipping").empty() &&
      s.at("gradient_clipping") != "auto")
    s.unsupported("gradient_clipping",
                  "libaccel does not clip on its own; call accel_clip_grad_norm before the "
                  "optimizer step and drop this key");
  if (s.flag("zero3_save_16bit_model", false))
    s.unsupported("zero3_save_16bit_model",
                  "save_model writes the parameters' own dtype; set it to false");
  (void)s.flag("zero3_init_flag", false);
  ShardingPlan plan;
  plan.family = "DEEPSPEED";
  plan.forward_prefetch = true;  // DeepSpeed's stage 3 prefetches in both directions
  plan.accumulation_steps = accumulation_steps;
  plan.state_dict = StateDictType::kSharded;  // DeepSpeed saves one optimizer file per rank
  plan.stage = 2;                             // and defaults to stage 2
  plan.source = s.name + " (" + s.origin + "), zero_stage 2 by default";
  if (s.has("zero_stage")) {
    long long stage = -1;
    if (!parse_int(s.at("zero_stage"), &stage) || stage < 0 || stage > 3)
      s.bad("zero_stage", "'" + s.at("zero_stage") + "' is not 0, 1, 2 or 3");
    plan.stage = static_cast<int>(stage);
    plan.source = s.said("zero_stage", s.at("zero_stage"));
  }
  return plan;
}

// Accelerate's launcher passes the sections as variables; a program it started sees only those.
void from_accelerate_environment(const EnvMap& env, Section* fsdp, Section* deepspeed) {
  auto get = [&env](const char* k) -> const std::string* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : &it->second;
  };
  const std::pair<const char*, const char*> fsdp_vars[] = {
      {"FSDP_VERSION", "fsdp_version"},
      {"FSDP_SHARDING_STRATEGY", "fsdp_sharding_strategy"},
      {"FSDP_RESHARD_AFTER_FORWARD", "fsdp_reshard_after_forward"},
      {"FSDP_STATE_DICT_TYPE", "fsdp_state_dict_type"},
      {"FSDP_AUTO_WRAP_POLICY", "fsdp_auto_wrap_policy"},
      {"FSDP_TRANSFORMER_CLS_TO_WRAP", "fsdp_transformer_layer_cls_to_wrap"},
      {"FSDP_MIN_NUM_PARAMS", "fsdp_min_num_params"},
      {"FSDP_FORWARD_PREFETCH", "fsdp_forward_prefetch"},
      {"FSDP_BACKWARD_PREFETCH", "fsdp_backward_prefetch"},
      {"FSDP_OFFLOAD_PARAMS", "fsdp_offload_params"},
      {"FSDP_ACTIVATION_CHECKPOINTING", "fsdp_activation_checkpointing"},
      {"FSDP_CPU_RAM_EFFICIENT_LOADING", "fsdp_cpu_ram_efficient_loading"}};
  for (const auto& [var, key] : fsdp_vars)
    if (const auto* v = get(var); v && !fsdp->has(key)) {
      fsdp->values[key] = *v;
      fsdp->origin = "env, from Accelerate's launcher";
    }
  // Accelerate's launcher always exports FSDP_SHARDING_STRATEGY (FULL_SHARD by default) and, for
  // FSDP2, FSDP_RESHARD_AFTER_FORWARD; FSDP2 reads only the latter.
  if (fsdp->has("fsdp_version") && fsdp->at("fsdp_version") == "2")
    fsdp->values.erase("fsdp_sharding_strategy");
  else if (fsdp->has("fsdp_sharding_strategy"))
    fsdp->values.erase("fsdp_reshard_after_forward");
  if (const auto* v = get("ACCELERATE_DEEPSPEED_ZERO_STAGE"); v && !deepspeed->has("zero_stage")) {
    deepspeed->values["zero_stage"] = *v;
    deepspeed->origin = "env ACCELERATE_DEEPSPEED_ZERO_STAGE";
  }
}

}  // namespace

ShardingPlan resolve_sharding(const Resolved& settings, const EnvMap& env) {
  const std::string type = settings.text("distributed_type");
  const bool fsdp = type == "FSDP" || settings.flag("use_fsdp");
  const bool deepspeed = type == "DEEPSPEED" || settings.flag("use_deepspeed");
  Section fsdp_section = read_section(settings, "fsdp_config", "fsdp_");
  Section ds_section = read_section(settings, "deepspeed_config", nullptr);
  if (fsdp && deepspeed)
    fail(Errc::config, "FSDP and DeepSpeed are both chosen (distributed_type " + type + ", " +
                           settings.at("distributed_type").origin.describe() +
                           "; use_fsdp/use_deepspeed): choose one");
  if (!fsdp && !fsdp_section.values.empty())
    fail(Errc::config, "fsdp_config (" + fsdp_section.origin + ") is set but distributed_type is " +
                           type + " (" + settings.at("distributed_type").origin.describe() +
                           "): set distributed_type: FSDP, or remove fsdp_config");
  if (!deepspeed && !ds_section.values.empty())
    fail(Errc::config, "deepspeed_config (" + ds_section.origin +
                           ") is set but distributed_type is " + type + " (" +
                           settings.at("distributed_type").origin.describe() +
                           "): set distributed_type: DEEPSPEED, or remove deepspeed_config");
  if (fsdp_section.values.empty() && ds_section.values.empty())
    from_accelerate_environment(env, &fsdp_section, &ds_section);
  if (fsdp) return from_fsdp(fsdp_section);
  if (deepspeed) return from_deepspeed(ds_section, settings);
  return ShardingPlan{};
}

void check_sharding_supported(const ShardingPlan& plan) {
  if (plan.hybrid)
    fail(Errc::unsupported, "hybrid sharding (" + plan.source +
                                ": shard within a machine, replicate across) is not built yet in "
                                "libaccel; use FULL_SHARD, SHARD_GRAD_OP or NO_SHARD");
}

}  // namespace accel::config
