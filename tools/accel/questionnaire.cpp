#include "questionnaire.hpp"

#include <algorithm>
#include <cctype>
#include <istream>
#include <ostream>
#include <set>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "config/keys.hpp"

namespace accel::cli {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

const config::KeySpec& key(const char* name) {
  const config::KeySpec* spec = config::find_key(name);
  if (!spec)
    fail(Errc::internal, std::string("configuration key '") + name + "' is not in the table");
  return *spec;
}

// Why libaccel refuses a feature, in the words the configuration layer uses for its key.
std::string why_not(const char* key_name) {
  const char* why = key(key_name).unsupported_why;
  return why ? why : std::string(key_name) + " is not supported by libaccel";
}

// The canonical value of an answer for `key_name`, or nothing with the layer's message in `*error`.
std::optional<std::string> normalized(const char* key_name, const std::string& answer,
                                      std::string* error) {
  try {
    return config::normalize(key(key_name), answer,
                             config::Origin{config::Source::kSetter, "your answer"});
  } catch (const Error& e) {
    *error = e.what();
    return std::nullopt;
  }
}

constexpr long long kMaxCount = 1 << 20;  // num_machines and num_processes as the key table bounds

}  // namespace

std::string Prompter::read_answer() {
  out_.flush();
  std::string line;
  if (!std::getline(in_, line)) {
    out_ << std::endl;  // the error then starts a line of its own, after the unanswered prompt
    fail(Errc::io,
         "standard input ended before the questionnaire was complete; nothing was written");
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (echo_) out_ << line << "\n";
  return trim(line);
}

size_t Prompter::choose(const std::string& question, const std::vector<Choice>& choices,
                        size_t default_index, const std::vector<Refused>& refused) {
  out_ << "\n" << question << "\n";
  for (size_t i = 0; i < choices.size(); ++i) out_ << "  " << i << ") " << choices[i].label << "\n";
  if (!refused.empty()) {
    out_ << "  (not supported by libaccel: ";
    for (size_t i = 0; i < refused.size(); ++i) out_ << (i ? ", " : "") << refused[i].label;
    out_ << ")\n";
  }
  const std::string prompt = "Type a number or a choice, Enter for " +
                             std::to_string(default_index) + " (" + choices[default_index].label +
                             "): ";
  for (;;) {
    out_ << prompt;
    const std::string answer = read_answer();
    if (answer.empty()) return default_index;
    const std::string typed = lower(answer);
    if (all_digits(answer)) {
      long long index = -1;
      if (parse_int(answer, &index) && index >= 0 && index < static_cast<long long>(choices.size()))
        return static_cast<size_t>(index);
    } else {
      for (size_t i = 0; i < choices.size(); ++i) {
        if (typed == lower(choices[i].label)) return i;
        for (const auto& alias : choices[i].aliases)
          if (typed == lower(alias)) return i;
      }
    }
    // A refused choice by its name, which may be a number past the menu (ZeRO stage 3).
    bool explained = false;
    for (const auto& r : refused) {
      bool match = typed == lower(r.label);
      for (const auto& alias : r.aliases) match = match || typed == lower(alias);
      if (match) {
        out_ << r.why << "; choose another.\n";
        explained = true;
        break;
      }
    }
    if (explained) continue;
    out_ << "'" << answer << "' is not one of the choices: type a number from 0 to "
         << choices.size() - 1 << " or a choice's name.\n";
  }
}

std::string Prompter::ask(
    const std::string& prompt,
    const std::function<std::optional<std::string>(const std::string&, std::string*)>& check) {
  for (;;) {
    out_ << prompt;
    const std::string answer = read_answer();
    std::string error;
    if (auto value = check(answer, &error)) return *value;
    out_ << error << "\n";
  }
}

long long Prompter::ask_int(const std::string& prompt, std::optional<long long> default_value,
                            long long min, long long max,
                            const std::function<std::string(long long)>& extra) {
  const std::string value = ask(prompt, [&](const std::string& answer, std::string* error) {
    long long n = 0;
    if (answer.empty() && default_value) {
      n = *default_value;
    } else if (!parse_int(answer, &n) || n < min || n > max) {
      *error = "Please enter an integer from " + std::to_string(min) + " to " +
               std::to_string(max) + ".";
      return std::optional<std::string>();
    }
    if (extra) *error = extra(n);
    if (!error->empty()) return std::optional<std::string>();
    return std::optional<std::string>(std::to_string(n));
  });
  long long n = 0;
  parse_int(value, &n);  // written by std::to_string above
  return n;
}

bool Prompter::ask_yes_no(const std::string& prompt, bool default_value) {
  // Accelerate takes "yes" or "no" in any case; "y" and "n" are what people type as well.
  const std::string value = ask(prompt, [&](const std::string& answer, std::string* error) {
    const std::string a = lower(answer);
    if (a.empty()) return std::optional<std::string>(default_value ? "yes" : "no");
    if (a == "yes" || a == "y") return std::optional<std::string>("yes");
    if (a == "no" || a == "n") return std::optional<std::string>("no");
    *error = "Please enter yes or no.";
    return std::optional<std::string>();
  });
  return value == "yes";
}

void Prompter::ask_only_no(const std::string& prompt, const std::string& why) {
  while (ask_yes_no(prompt, false)) out_ << why << "; only 'no' can be chosen here.\n";
}

namespace {

// The section's text as the configuration layer reads it back (std::map: keys sorted, as
// Accelerate writes them).
std::string flow_of(const std::map<std::string, std::string>& section) {
  std::string flow = "{";
  for (const auto& [key, value] : section)
    flow += (flow.size() > 1 ? ", " : "") + key + ": " + value;
  return flow + "}";
}

// DeepSpeed's questions in Accelerate's order and words, on every machine type (ZeRO stages 0-3
// run on CPUs as well); what libaccel lacks is named in the menus and refused. Returns the
// deepspeed_config section as config::normalize reads it back (flow YAML, keys sorted), or
// nothing when DeepSpeed is not chosen.
std::optional<std::string> ask_deepspeed(Prompter& p, long long num_machines) {
  if (!p.ask_yes_no("Do you want to use DeepSpeed? [yes/NO]: ", false)) return std::nullopt;
  p.ask_only_no("Do you want to specify a json file to a DeepSpeed config? [yes/NO]: ",
                "DeepSpeed's JSON files are not read by libaccel (its questions below write the "
                "settings it runs)");
  std::map<std::string, std::string> section;
  const size_t stage = p.choose("What should be your DeepSpeed's ZeRO optimization stage?",
                                {{"0", {}}, {"1", {}}, {"2", {}}, {"3", {}}}, 2, {});
  section["zero_stage"] = std::to_string(stage);
  if (stage >= 2) {
    const std::vector<Prompter::Refused> offload = {
        {"cpu", {}, "offloading to the CPU is not supported by libaccel"},
        {"nvme", {}, "offloading to NVMe is not supported by libaccel"}};
    p.choose("Where to offload optimizer states?", {{"none", {}}}, 0, offload);
    section["offload_optimizer_device"] = "none";
    p.choose("Where to offload parameters?", {{"none", {}}}, 0, offload);
    section["offload_param_device"] = "none";
  }
  section["gradient_accumulation_steps"] = std::to_string(p.ask_int(
      "How many gradient accumulation steps you're passing in your script? [1]: ", 1, 1, 1 << 30));
  p.ask_only_no("Do you want to use gradient clipping? [yes/NO]: ",
                "libaccel does not clip on its own: call accel_clip_grad_norm before the optimizer "
                "step");
  if (stage == 3) {
    p.ask_only_no("Do you want to save 16-bit model weights when using ZeRO Stage-3? [yes/NO]: ",
                  "accel_save_model writes the parameters in their own dtype");
    section["zero3_save_16bit_model"] = "false";
  }
  p.ask_only_no(
      "Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3 for constructing "
      "massive models? [yes/NO]: ",
      "deepspeed.zero.Init is not supported by libaccel: each rank builds the whole model, and "
      "keeps only its part once it is prepared");
  section["zero3_init_flag"] = "false";
  p.ask_only_no("Do you want to enable Mixture-of-Experts training (MoE)? [yes/NO]: ",
                "DeepSpeed's Mixture-of-Experts layers are not supported by libaccel");
  if (num_machines > 1) {
    std::vector<Prompter::Refused> launchers;
    for (const char* l : {"pdsh", "openmpi", "mvapich", "mpich", "nossh"})
      launchers.push_back({l, {}, std::string("`accel launch` starts the ranks itself, not ") + l});
    p.choose("Which Type of launcher do you want to use?", {{"standard", {}}}, 0, launchers);
    section["deepspeed_multinode_launcher"] = "standard";
  }
  return flow_of(section);
}

// FSDP's questions in Accelerate's order and words (its FSDP1 questionnaire), offered on multi-CPU
// machines too; what libaccel lacks (hybrid sharding, offload, _no_split_modules, activation
// checkpointing) is named and refused. Returns the fsdp_config section, or nothing when FSDP is
// not chosen.
std::optional<std::string> ask_fsdp(Prompter& p) {
  if (!p.ask_yes_no("Do you want to use FullyShardedDataParallel? [yes/NO]: ", false))
    return std::nullopt;
  std::map<std::string, std::string> section;
  const std::vector<std::string> strategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
  const std::string hybrid =
      "hybrid sharding (within a machine, replicated across) is not "
      "supported by libaccel";
  section["fsdp_sharding_strategy"] =
      strategies[p.choose("What should be your sharding strategy?",
                          {{"FULL_SHARD", {}}, {"SHARD_GRAD_OP", {}}, {"NO_SHARD", {}}}, 0,
                          {{"HYBRID_SHARD", {}, hybrid}, {"HYBRID_SHARD_ZERO2", {}, hybrid}})];
  p.ask_only_no("Do you want to offload parameters and gradients to CPU? [yes/NO]: ",
                "CPU offload is not supported by libaccel (on a CPU run the parameters are in "
                "host memory already)");
  section["fsdp_offload_params"] = "false";
  const std::vector<std::string> policies = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP",
                                             "NO_WRAP"};
  const size_t policy = p.choose("What should be your auto wrap policy?",
                                 {{policies[0], {}}, {policies[1], {}}, {policies[2], {}}}, 0);
  section["fsdp_auto_wrap_policy"] = policies[policy];
  if (policy == 0) {
    p.ask_only_no(
        "Do you want to use the model's `_no_split_modules` to wrap. Only applicable for 🤗 "
        "Transformers [yes/NO]: ",
        "libaccel's models have no `_no_split_modules`: name the classes to wrap");
    section["fsdp_transformer_layer_cls_to_wrap"] = p.ask(
        "Specify the comma-separated list of transformer layer class names (case-sensitive) to "
        "wrap ,e.g, :`BertLayer`, `GPTJBlock`, `T5Block`, `BertLayer,BertEmbeddings,"
        "BertSelfOutput` ...? : ",
        [](const std::string& answer, std::string* error) -> std::optional<std::string> {
          const std::string names = trim(answer);
          if (names.empty() || names.find_first_of("{}[]:#'\"") != std::string::npos) {
            *error =
                "Please enter one or more class names separated by commas (`Linear`, "
                "`Block`, ...).";
            return std::nullopt;
          }
          return names;
        });
  } else if (policy == 1) {
    section["fsdp_min_num_params"] = std::to_string(p.ask_int(
        "What should be your FSDP's minimum number of parameters for Default Auto Wrapping "
        "Policy? [1e8]: ",
        100000000, 0, int64_t{1} << 50));
  }
  const std::vector<std::string> prefetch = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
  section["fsdp_backward_prefetch"] =
      prefetch[p.choose("What should be your FSDP's backward prefetch policy?",
                        {{prefetch[0], {}}, {prefetch[1], {}}, {prefetch[2], {}}}, 0)];
  const std::vector<std::string> state = {"FULL_STATE_DICT", "LOCAL_STATE_DICT",
                                          "SHARDED_STATE_DICT"};
  section["fsdp_state_dict_type"] =
      state[p.choose("What should be your FSDP's state dict type?",
                     {{state[0], {}}, {state[1], {}}, {state[2], {}}}, 2)];
  auto flag = [&](const char* key, const std::string& prompt, bool default_value) {
    const bool on = p.ask_yes_no(prompt, default_value);
    section[key] = on ? "true" : "false";
    return on;
  };
  flag("fsdp_forward_prefetch",
       "Do you want to enable FSDP's forward prefetch policy? [yes/NO]: ", false);
  flag("fsdp_use_orig_params",
       "Do you want to enable FSDP's `use_orig_params` feature? [YES/no]: ", true);
  if (flag("fsdp_cpu_ram_efficient_loading",
           "Do you want to enable CPU RAM efficient model loading? Only applicable for 🤗 "
           "Transformers models. [YES/no]: ",
           true))
    section["fsdp_sync_module_states"] = "true";
  else
    flag("fsdp_sync_module_states",
         "Do you want each individually wrapped FSDP unit to broadcast module parameters from "
         "rank 0 at the start? [YES/no]: ",
         true);
  p.ask_only_no("Do you want to enable FSDP activation checkpointing? [yes/NO]: ",
                "activation checkpointing is not supported by libaccel");
  section["fsdp_activation_checkpointing"] = "false";
  return flow_of(section);
}

}  // namespace

FileEntries run_questionnaire(Prompter& p) {
  p.choose("In which compute environment are you running?", {{"This machine", {"LOCAL_MACHINE"}}},
           0,
           {{"AWS (Amazon SageMaker)",
             {"AWS", "SageMaker", "Amazon SageMaker", "AMAZON_SAGEMAKER"},
             "Amazon SageMaker is not supported by libaccel"}});

  // Accelerate's machine types; libaccel trains on CPUs and CUDA GPUs only.
  const std::vector<std::string> types = {"NO", "MULTI_CPU", "MULTI_GPU"};
  std::vector<Prompter::Refused> other_types;
  for (const char* t : {"XPU", "HPU", "NPU", "MLU", "SDAA", "MUSA", "NEURON"}) {
    const std::string label = std::string("multi-") + t;
    other_types.push_back({label,
                           {std::string("MULTI_") + t},
                           label + " is not supported by libaccel (it trains on CPUs and GPUs)"});
  }
  other_types.push_back({"TPU", {"XLA"}, "TPUs are not supported by libaccel"});
  const std::string type = types[p.choose("Which type of machine are you using?",
                                          {{"No distributed training", {"NO"}},
                                           {"multi-CPU", {"MULTI_CPU"}},
                                           {"multi-GPU", {"MULTI_GPU"}}},
                                          0, other_types)];

  long long num_machines = 1, machine_rank = 0, port = 0;
  std::string ip, rdzv_backend = "static";
  bool same_network = true, debug = false;
  if (type != "NO") {
    num_machines = p.ask_int(
        "How many different machines will you use (use more than 1 for multi-node training)? [1]: ",
        1, 1, kMaxCount);
    if (num_machines > 1) {
      // Accelerate offers a menu of the ranks; a typed number says the same for any count.
      machine_rank = p.ask_int(
          "What is the rank of this machine? (0 to " + std::to_string(num_machines - 1) + ") [0]: ",
          0, 0, num_machines - 1);
      ip = p.ask("What is the IP address of the machine that will host the main process? ",
                 [](const std::string& answer, std::string* error) -> std::optional<std::string> {
                   // Printable ASCII: an address or a host name, never spaces or bytes that
                   // YAML and JSON readers would have to guess the encoding of.
                   const bool printable = std::all_of(answer.begin(), answer.end(),
                                                      [](char c) { return c > ' ' && c < 0x7f; });
                   if (answer.empty() || !printable) {
                     *error =
                         "Please enter the address of machine 0 (an IP address or a host name).";
                     return std::nullopt;
                   }
                   return normalized("main_process_ip", answer, error);
                 });
      // Port 0 would mean "pick a free one", which only works when every process is on one machine.
      port = p.ask_int("What is the port you will use to communicate with the main process? ",
                       std::nullopt, 1, 65535);
      same_network = p.ask_yes_no(
          "Are all the machines on the same local network? Answer `no` if nodes are on the cloud "
          "and/or on different network hosts [YES/no]: ",
          true);
      if (!same_network)
        rdzv_backend =
            p.ask("What rendezvous backend will you use? ('static', 'c10d', ...): ",
                  [](const std::string& answer, std::string* error) {
                    return normalized("rdzv_backend", answer.empty() ? "static" : answer, error);
                  });
    }
    debug = p.ask_yes_no(
        "Should distributed operations be checked while running for errors? This can avoid "
        "timeout issues but will be slower. [yes/NO]: ",
        false);
  }

  bool use_cpu = type == "MULTI_CPU";
  if (type == "NO")
    use_cpu = p.ask_yes_no(
        "Do you want to run your training on CPU only (even if a GPU / Apple Silicon / Ascend NPU "
        "device is available)? [yes/NO]:",
        false);
  if (type == "MULTI_CPU")
    p.ask_only_no("Do you want accelerate to launch mpirun? [yes/NO]: ", why_not("mpirun_config"));
  p.ask_only_no("Do you wish to optimize your script with torch dynamo?[yes/NO]:",
                why_not("dynamo_config"));
  const std::optional<std::string> deepspeed = ask_deepspeed(p, num_machines);
  // Accelerate asks FSDP's questions on multi-GPU machines; libaccel shards on CPUs as well.
  std::optional<std::string> fsdp;
  if ((type == "MULTI_GPU" || type == "MULTI_CPU") && !deepspeed) fsdp = ask_fsdp(p);
  if (type == "MULTI_GPU" && !deepspeed && !fsdp)
    p.ask_only_no("Do you want to use Megatron-LM ? [yes/NO]: ", why_not("megatron_lm_config"));
  const bool sharded = deepspeed || fsdp;

  long long num_processes = 1;
  if (type != "NO" || sharded) {
    // Accelerate's num_processes is the total over all machines; `accel launch` starts an equal
    // share on each, so the total must divide.
    num_processes = p.ask_int(
        use_cpu ? "How many processes should be used for distributed training? [1]:"
                : "How many GPU(s) should be used for distributed training? [1]:",
        1, 1, kMaxCount, [&](long long n) -> std::string {
          if (n % num_machines != 0)
            return "The total number of processes (" + std::to_string(n) +
                   ") must divide by the number of machines (" + std::to_string(num_machines) +
                   ").";
          if (type == "MULTI_GPU" && !sharded && num_machines == 1 && n == 1)
            return "multi-GPU with one GPU on one machine is not distributed: use more than 1, "
                   "or start again and choose `No distributed training`.";
          return "";
        });
  }

  std::string gpu_ids;
  if (!use_cpu && !sharded) {  // Accelerate asks neither question under DeepSpeed or FSDP
    gpu_ids = p.ask(
        "What GPU(s) (by id) should be used for training on this machine as a comma-separated "
        "list? [all]:",
        [](const std::string& answer, std::string* error) -> std::optional<std::string> {
          if (answer.empty() || lower(answer) == "all") return std::string("all");
          std::string ids;
          std::set<long long> seen;
          size_t start = 0;
          for (;;) {
            const size_t comma = answer.find(',', start);
            const std::string item = trim(answer.substr(start, comma - start));
            long long id = -1;
            if (!all_digits(item) || !parse_int(item, &id) || id >= kMaxCount ||
                !seen.insert(id).second) {
              *error = "Please enter `all` or GPU ids (0, 1, ...) separated by commas, each once.";
              return std::nullopt;
            }
            ids += (ids.empty() ? "" : ",") + std::to_string(id);
            if (comma == std::string::npos) break;
            start = comma + 1;
          }
          return ids;
        });
    p.ask_only_no(
        "Would you like to enable numa efficiency? (Currently only supported on NVIDIA hardware). "
        "[yes/NO]: ",
        why_not("enable_cpu_affinity"));
  }

  const std::vector<std::string> precisions = {"no", "fp16", "bf16"};
  const std::string mixed_precision = precisions[p.choose("Do you wish to use mixed precision?",
                                                          {{"no", {}}, {"fp16", {}}, {"bf16", {}}},
                                                          0, {{"fp8", {}, why_not("fp8_config")}})];

  // What Accelerate's ClusterConfig.to_dict() keeps for these answers: unset (None) values and
  // empty sections are left out, as Accelerate leaves them out.
  FileEntries e;
  e["compute_environment"] = "LOCAL_MACHINE";
  e["debug"] = debug ? "true" : "false";
  e["distributed_type"] = deepspeed ? "DEEPSPEED" : fsdp ? "FSDP" : type;
  if (deepspeed) e["deepspeed_config"] = *deepspeed;
  if (fsdp) e["fsdp_config"] = *fsdp;
  e["downcast_bf16"] = "false";
  e["enable_cpu_affinity"] = "false";
  if (!gpu_ids.empty()) e["gpu_ids"] = gpu_ids;
  e["machine_rank"] = std::to_string(machine_rank);
  if (num_machines > 1) {
    e["main_process_ip"] = ip;
    e["main_process_port"] = std::to_string(port);
  }
  e["main_training_function"] = "main";
  e["mixed_precision"] = mixed_precision;
  e["num_machines"] = std::to_string(num_machines);
  e["num_processes"] = std::to_string(num_processes);
  e["rdzv_backend"] = rdzv_backend;
  e["same_network"] = same_network ? "true" : "false";
  e["tpu_env"] = "[]";
  e["tpu_use_cluster"] = "false";
  e["tpu_use_sudo"] = "false";
  e["use_cpu"] = use_cpu ? "true" : "false";
  return e;
}

}  // namespace accel::cli
