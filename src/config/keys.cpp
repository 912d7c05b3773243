#include "config/keys.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "tracking/tracker.hpp"

namespace accel::config {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string join(const std::vector<const char*>& items) {
  std::string out;
  for (const char* item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

constexpr const char* kNoTpu = "TPUs are not supported by libaccel";
constexpr const char* kNoDynamo = "torch.compile (dynamo) does not exist in LibTorch's C++ API";

// The table in sections, each appending its keys in the table's order; build_table joins them.
void add_cluster_keys(std::vector<KeySpec>& t) {
  auto add = [&t](KeySpec k) { t.push_back(std::move(k)); };
  // Accelerate's ClusterConfig keys, in the order `accelerate config` writes them.
  add({"compute_environment",
       Kind::kEnum,
       "LOCAL_MACHINE",
       {"LOCAL_MACHINE"},
       {"AMAZON_SAGEMAKER"}});
  add({"debug", Kind::kBool, "false", {}, {}, {"ACCELERATE_DEBUG_MODE"}});
  add({"distributed_type",
       Kind::kEnum,
       "NO",
       {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED"},
       {"XLA", "TPU", "MEGATRON_LM", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
        "MULTI_XPU", "MULTI_HPU", "MULTI_NEURON"}});
  // Accelerate writes 'no' (interactive) or false (`config default`); both mean off.
  add({"downcast_bf16", Kind::kBool, "false", {}, {}, {}, 0, 0, true, "false", kNoTpu});
  add({"enable_cpu_affinity",
       Kind::kBool,
       "false",
       {},
       {},
       {},
       0,
       0,
       true,
       "false",
       "NUMA affinity pinning is not supported by libaccel"});
  add({"gpu_ids", Kind::kString, "all"});
  add({"machine_rank", Kind::kInt, "0", {}, {}, {}, 0, 1 << 20});
  add({"main_process_ip", Kind::kString, ""});
  add({"main_process_port", Kind::kInt, "0", {}, {}, {}, 0, 65535});
  add({"main_training_function", Kind::kString, "main"});
  add({"mixed_precision",
       Kind::kEnum,
       "no",
       {"no", "fp16", "bf16"},
       {"fp8"},
       {"ACCELERATE_MIXED_PRECISION"}});
  add({"num_machines", Kind::kInt, "1", {}, {}, {}, 1, 1 << 20});
  add({"num_processes", Kind::kInt, "1", {}, {}, {}, -1, 1 << 20});
  add({"rdzv_backend", Kind::kEnum, "static", {"static"}, {"c10d", "etcd", "etcd-v2"}});
  add({"same_network", Kind::kBool, "true"});
  add({"use_cpu", Kind::kBool, "false", {}, {}, {"ACCELERATE_USE_CPU"}});
}

// Sharded data parallel's maps, and the maps of features libaccel does not have.
void add_feature_map_keys(std::vector<KeySpec>& t) {
  auto add = [&t](KeySpec k) { t.push_back(std::move(k)); };
  // Sharded data parallel: every key inside is checked by config/sharding.hpp at init.
  add({"deepspeed_config", Kind::kMap, "{}"});
  add({"fsdp_config", Kind::kMap, "{}"});
  // Known keys of features libaccel does not have: accepted only when empty or neutral.
  add({"fp8_config",
       Kind::kMap,
       "{}",
       {},
       {},
       {},
       0,
       0,
       true,
       "{}",
       "fp8 is not supported by libaccel"});
  add({"megatron_lm_config",
       Kind::kMap,
       "{}",
       {},
       {},
       {},
       0,
       0,
       true,
       "{}",
       "Megatron-LM is not supported by libaccel"});
  add({"mpirun_config",
       Kind::kMap,
       "{}",
       {},
       {},
       {},
       0,
       0,
       true,
       "{}",
       "mpirun launching is not supported by libaccel; use accel launch"});
  add({"parallelism_config",
       Kind::kMap,
       "{}",
       {},
       {},
       {},
       0,
       0,
       true,
       "{}",
       "N-D parallelism is not supported by libaccel"});
  add({"dynamo_config", Kind::kMap, "{}", {}, {}, {}, 0, 0, true, "{}", kNoDynamo});
}

// IPEX and TPU keys, the launcher's switches and Accelerate's environment-only ones.
void add_unsupported_keys(std::vector<KeySpec>& t) {
  auto add = [&t](KeySpec k) { t.push_back(std::move(k)); };
  // Accelerate 0.2x-1.12 write `ipex_config: {ipex: false}` into every CPU configuration.
  add({"ipex_config",
       Kind::kMap,
       "{}",
       {},
       {},
       {},
       0,
       0,
       true,
       "{}",
       "the Intel Extension for PyTorch (IPEX) is not supported by libaccel"});
  add({"tpu_name", Kind::kString, "", {}, {}, {}, 0, 0, true, "", kNoTpu});
  add({"tpu_zone", Kind::kString, "", {}, {}, {}, 0, 0, true, "", kNoTpu});
  add({"tpu_vm", Kind::kList, "[]", {}, {}, {}, 0, 0, true, "[]", kNoTpu});
  add({"tpu_env", Kind::kList, "[]", {}, {}, {}, 0, 0, true, "[]", kNoTpu});
  add({"tpu_use_cluster", Kind::kBool, "false", {}, {}, {}, 0, 0, true, "false", kNoTpu});
  add({"tpu_use_sudo", Kind::kBool, "false", {}, {}, {}, 0, 0, true, "false", kNoTpu});
  add({"command_file", Kind::kString, "", {}, {}, {}, 0, 0, true, "", kNoTpu});
  add({"commands", Kind::kList, "[]", {}, {}, {}, 0, 0, true, "[]", kNoTpu});
  // Accelerate's launcher's switches for sharded data parallel (config/sharding.hpp reads them).
  add({"use_deepspeed", Kind::kBool, "false", {}, {}, {"ACCELERATE_USE_DEEPSPEED"}, 0, 0, false});
  add({"use_fsdp", Kind::kBool, "false", {}, {}, {"ACCELERATE_USE_FSDP"}, 0, 0, false});
  // Accelerate's environment-only switches for unsupported paradigms.
  add({"use_megatron_lm",
       Kind::kBool,
       "false",
       {},
       {},
       {"ACCELERATE_USE_MEGATRON_LM"},
       0,
       0,
       false,
       "false",
       "Megatron-LM is not supported by libaccel"});
  add({"dynamo_backend",
       Kind::kString,
       "no",
       {},
       {},
       {"ACCELERATE_DYNAMO_BACKEND"},
       0,
       0,
       false,
       "no",
       kNoDynamo});
}

// libaccel's own settings, Accelerate's DataLoader and Project configurations, the trackers',
// the logger's, and the Accelerator's arguments.
void add_own_keys(std::vector<KeySpec>& t) {
  auto add = [&t](KeySpec k) { t.push_back(std::move(k)); };
  // libaccel's own settings.
  add({"gradient_accumulation_steps",
       Kind::kInt,
       "1",
       {},
       {},
       {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS"},
       1,
       1 << 30});
  add({"rendezvous_timeout", Kind::kSeconds, "120", {}, {}, {"ACCEL_RENDEZVOUS_TIMEOUT"}});
  add({"collective_timeout", Kind::kSeconds, "300", {}, {}, {"ACCEL_COLLECTIVE_TIMEOUT"}});
  add({"num_threads", Kind::kInt, "0", {}, {}, {"ACCEL_NUM_THREADS"}, 0, 4096});
  add({"malloc_tuning", Kind::kBool, "true", {}, {}, {"ACCEL_MALLOC_TUNING"}});
  add({"shared_memory_allreduce", Kind::kBool, "true", {}, {}, {"ACCEL_SHARED_MEMORY_ALLREDUCE"}});
  // tcp: libaccel's own, every connection proves the job token; gloo: LibTorch's, whose listener
  // authenticates nothing (kept for comparison).
  add({"collective_transport",
       Kind::kEnum,
       "tcp",
       {"tcp", "gloo"},
       {},
       {"ACCEL_COLLECTIVE_TRANSPORT"}});
  // Accelerate's DataLoaderConfiguration: defaults for every dataloader of the accelerator.
  add({"split_batches", Kind::kBool, "false", {}, {}, {"ACCEL_SPLIT_BATCHES"}});
  add({"even_batches", Kind::kBool, "true", {}, {}, {"ACCEL_EVEN_BATCHES"}});
  // data_seed: every dataloader's default `seed` (-1: none, the loader's own default 0). libaccel's
  // shuffle is always a function of (seed, epoch): Accelerate's seedable sampler, so
  // use_seedable_sampler is accepted and changes nothing.
  add({"data_seed", Kind::kInt, "-1", {}, {}, {"ACCEL_DATA_SEED"}, -1, INT64_MAX});
  add({"use_seedable_sampler", Kind::kBool, "true", {}, {}, {"ACCEL_USE_SEEDABLE_SAMPLER"}});
  // Accelerate's GradientAccumulationPlugin, beside gradient_accumulation_steps (its num_steps).
  add({"sync_each_batch", Kind::kBool, "false", {}, {}, {"ACCEL_SYNC_EACH_BATCH"}});
  add({"sync_with_dataloader", Kind::kBool, "true", {}, {}, {"ACCEL_SYNC_WITH_DATALOADER"}});
  add({"adjust_scheduler", Kind::kBool, "true", {}, {}, {"ACCEL_ADJUST_SCHEDULER"}});
  // Accelerator(device_placement=..., step_scheduler_with_optimizer=...).
  // Accelerate's ProjectConfiguration.
  add({"project_dir", Kind::kString, "", {}, {}, {"ACCEL_PROJECT_DIR"}});
  add({"automatic_checkpoint_naming",
       Kind::kBool,
       "false",
       {},
       {},
       {"ACCEL_AUTOMATIC_CHECKPOINT_NAMING"}});
  // save_on_each_node: with several machines, each machine's local main process writes its own
  // copy of every checkpoint file (no shared directory needed); otherwise the main process alone.
  add({"save_on_each_node", Kind::kBool, "false", {}, {}, {"ACCEL_SAVE_ON_EACH_NODE"}});
  add({"total_limit", Kind::kInt, "0", {}, {}, {"ACCEL_TOTAL_LIMIT"}, 0, 1 << 20});
  // Accelerator(log_with=...) and ProjectConfiguration(logging_dir=...): the trackers.
  add({"log_with", Kind::kString, "", {}, {}, {"ACCEL_LOG_WITH"}});
  add({"logging_dir", Kind::kString, "", {}, {}, {"ACCEL_LOGGING_DIR"}});
  // Accelerate's get_logger(log_level=...) from ACCELERATE_LOG_LEVEL: the logger's level.
  add({"log_level",
       Kind::kEnum,
       "info",
       {"notset", "debug", "info", "warning", "error", "critical"},
       {},
       {"ACCELERATE_LOG_LEVEL", "ACCEL_LOG_LEVEL"}});
  add({"device_placement", Kind::kBool, "true", {}, {}, {"ACCEL_DEVICE_PLACEMENT"}});
  add({"step_scheduler_with_optimizer",
       Kind::kBool,
       "true",
       {},
       {},
       {"ACCEL_STEP_SCHEDULER_WITH_OPTIMIZER"}});
}

std::vector<KeySpec> build_table() {
  std::vector<KeySpec> t;
  add_cluster_keys(t);
  add_feature_map_keys(t);
  add_unsupported_keys(t);
  add_own_keys(t);
  return t;
}

bool is_neutral(const std::string& canonical, const char* neutral) {
  return lower(canonical) == lower(neutral);
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string Origin::describe() const {
  switch (source) {
    case Source::kDefault:
      return "default";
    case Source::kFile:
      return "file " + where;
    case Source::kEnv:
      return "env " + where;
    case Source::kSetter:
      return where.empty() ? "setter" : where;
  }
  return "unknown";
}

const std::vector<KeySpec>& key_table() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const KeySpec* find_key(const std::string& name) {
  for (const auto& spec : key_table())
    if (name == spec.name) return &spec;
  return nullptr;
}

bool parse_bool(const std::string& text, bool* out) {
  const std::string v = lower(trim(text));
  if (v == "y" || v == "yes" || v == "t" || v == "true" || v == "on" || v == "1") {
    *out = true;
    return true;
  }
  if (v == "n" || v == "no" || v == "f" || v == "false" || v == "off" || v == "0") {
    *out = false;
    return true;
  }
  return false;
}

std::string unknown_key_message(const std::string& unknown, const Origin& origin) {
  std::string best;
  size_t best_distance = 4;
  std::vector<const char*> names;
  for (const auto& spec : key_table()) {
    // A file may hold only file keys: the environment-only ones are neither listed nor suggested.
    if (origin.source == Source::kFile && !spec.in_file) continue;
    names.push_back(spec.name);
    const size_t d = edit_distance(unknown, spec.name);
    if (d < best_distance) {
      best_distance = d;
      best = spec.name;
    }
  }
  std::string msg = "unknown configuration key '" + unknown + "' (" + origin.describe() + ")";
  if (!best.empty()) msg += "; did you mean '" + best + "'?";
  msg += " Known keys: " + join(names);
  return msg;
}

std::string normalize(const KeySpec& spec, const std::string& raw, const Origin& origin) {
  const std::string value = trim(raw);
  const std::string where =
      "configuration key '" + std::string(spec.name) + "' (" + origin.describe() + "): ";
  auto bad = [&](const std::string& allowed) -> std::string {
    fail(Errc::config, where + "invalid value '" + raw + "'; allowed: " + allowed);
  };
  std::string canonical;
  switch (spec.kind) {
    case Kind::kString:
      for (unsigned char c : value)
        if (c < 0x20 || c == 0x7f) bad("text without control characters (newlines, tabs)");
      canonical = value;
      if (std::string(spec.name) == "log_with") {
        try {
          tracking::parse_log_with(value);
        } catch (const Error& e) {
          fail(Errc::config, where + e.what());
        }
      }
      break;
    case Kind::kBool: {
      bool b = false;
      if (!parse_bool(value, &b)) bad("true/false (also yes/no, on/off, 1/0, y/n, t/f)");
      canonical = b ? "true" : "false";
      break;
    }
    case Kind::kInt: {
      long long n = 0;
      const std::string range =
          "an integer from " + std::to_string(spec.min) + " to " + std::to_string(spec.max);
      if (!parse_int(value, &n) || n < spec.min || n > spec.max) bad(range);
      canonical = std::to_string(n);
      break;
    }
    case Kind::kSeconds: {
      double s = 0;
      if (!parse_real(value, &s) || !(s > 0 && s <= 1e7))
        bad("a finite number of seconds greater than 0, at most 1e7");
      canonical = value;
      break;
    }
    case Kind::kEnum: {
      for (const char* a : spec.allowed)
        if (lower(value) == lower(a)) canonical = a;
      if (canonical.empty()) {
        for (const char* u : spec.unsupported)
          if (lower(value) == lower(u))
            fail(Errc::unsupported,
                 where + "'" + value +
                     "' is not supported by libaccel; supported: " + join(spec.allowed));
        std::string allowed = join(spec.allowed);
        if (!spec.unsupported.empty())
          allowed += " (known but unsupported: " + join(spec.unsupported) + ")";
        bad(allowed);
      }
      break;
    }
    case Kind::kMap:
    case Kind::kList: {
      // YAML's ways of writing "nothing" all mean the empty collection.
      const char* empty = spec.kind == Kind::kMap ? "{}" : "[]";
      const bool nothing = value.empty() || value == empty || value == "null" || value == "~";
      canonical = nothing ? empty : value;
      break;
    }
  }
  if (spec.neutral_only && !is_neutral(canonical, spec.neutral_only)) {
    std::string neutral = spec.neutral_only;
    if (neutral.empty()) neutral = "empty";
    fail(Errc::unsupported, where + "value '" + raw +
                                "' is not supported: " + spec.unsupported_why +
                                ". Remove the key or set it to " + neutral + ".");
  }
  return canonical;
}

}  // namespace accel::config
