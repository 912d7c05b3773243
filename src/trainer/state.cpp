#include "trainer/state.hpp"

#include <limits>
#include <string>

#include "common/error.hpp"
#include "trainer/python_json.hpp"

namespace accel::trainer {

namespace {

nlohmann::json number_json(const Number& n) {
  return n.is_int ? nlohmann::json(n.integer) : nlohmann::json(n.real);
}

[[noreturn]] void malformed(const std::string& key, const std::string& why) {
  fail(Errc::io, "trainer_state.json: '" + key + "' " + why);
}

// Python's json writes NaN, Infinity and -Infinity bare (a diverged loss, an fp16 overflow's
// grad_norm); JSON has no such numbers, so they are read as these marked strings first.
const char* const kNonFinite[] = {"NaN", "Infinity", "-Infinity"};
const std::string kMark = "\x01nonfinite:";  // as parsed from kMarkJson
const std::string kMarkJson = "\\u0001nonfinite:";

std::string mark_non_finite(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : kNonFinite) {
      const size_t n = std::char_traits<char>::length(word);
      if (text.compare(i, n, word) == 0) {
        out += "\"" + kMarkJson + word + "\"";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

Number number_of(const std::string& key, const nlohmann::json& v) {
  if (v.is_number_integer()) return Number::of_int(v.get<int64_t>());
  if (v.is_number_float()) return Number::of_real(v.get<double>());
  if (v.is_string() && v.get<std::string>().rfind(kMark, 0) == 0) {
    const std::string word = v.get<std::string>().substr(kMark.size());
    const double inf = std::numeric_limits<double>::infinity();
    return Number::of_real(word == "NaN"        ? std::numeric_limits<double>::quiet_NaN()
                           : word == "Infinity" ? inf
                                                : -inf);
  }
  malformed(key, "is not a number");
}

int64_t int_of(const std::string& key, const nlohmann::json& v) {
  if (!v.is_number_integer()) malformed(key, "is not an integer");
  return v.get<int64_t>();
}

bool bool_of(const std::string& key, const nlohmann::json& v) {
  if (!v.is_boolean()) malformed(key, "is not true or false");
  return v.get<bool>();
}

std::vector<LogEntry> history_of(const nlohmann::json& v) {
  if (!v.is_array()) malformed("log_history", "is not a list");
  std::vector<LogEntry> out;
  for (const auto& entry : v) {
    if (!entry.is_object()) malformed("log_history", "holds an entry that is not an object");
    LogEntry e;
    for (auto it = entry.begin(); it != entry.end(); ++it)
      e[it.key()] =
          number_of("log_history[" + std::to_string(out.size()) + "]." + it.key(), it.value());
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

nlohmann::json TrainerState::to_json_value() const {
  nlohmann::json j = extra;
  j["epoch"] = epoch ? number_json(*epoch) : nlohmann::json();
  j["global_step"] = global_step;
  j["max_steps"] = max_steps;
  j["logging_steps"] = logging_steps;
  j["eval_steps"] = eval_steps;
  j["save_steps"] = save_steps;
  j["train_batch_size"] = train_batch_size ? nlohmann::json(*train_batch_size) : nlohmann::json();
  j["num_train_epochs"] = num_train_epochs;
  j["num_input_tokens_seen"] = num_input_tokens_seen;
  j["total_flos"] = number_json(total_flos);
  nlohmann::json history = nlohmann::json::array();
  for (const auto& entry : log_history) {
    nlohmann::json e = nlohmann::json::object();
    for (const auto& [k, v] : entry) e[k] = number_json(v);
    history.push_back(std::move(e));
  }
  j["log_history"] = std::move(history);
  j["best_metric"] = best_metric ? number_json(*best_metric) : nlohmann::json();
  j["best_model_checkpoint"] =
      best_model_checkpoint ? nlohmann::json(*best_model_checkpoint) : nlohmann::json();
  j["is_local_process_zero"] = is_local_process_zero;
  j["is_world_process_zero"] = is_world_process_zero;
  j["is_hyper_param_search"] = is_hyper_param_search;
  j["trial_name"] = trial_name;
  j["trial_params"] = trial_params;
  return j;
}

std::string TrainerState::to_json() const {
  return python_json_dumps(to_json_value()) + "\n";
}

TrainerState TrainerState::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(mark_non_finite(text));
  } catch (const nlohmann::json::exception& e) {
    fail(Errc::io, std::string("trainer_state.json is not JSON: ") + e.what());
  }
  if (!j.is_object()) fail(Errc::io, "trainer_state.json is not a JSON object");
  TrainerState s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "epoch")
      s.epoch = v.is_null() ? std::nullopt : std::optional(number_of(k, v));
    else if (k == "global_step")
      s.global_step = int_of(k, v);
    else if (k == "max_steps")
      s.max_steps = int_of(k, v);
    else if (k == "logging_steps")
      s.logging_steps = int_of(k, v);
    else if (k == "eval_steps")
      s.eval_steps = int_of(k, v);
    else if (k == "save_steps")
      s.save_steps = int_of(k, v);
    else if (k == "train_batch_size")
      s.train_batch_size = v.is_null() ? std::nullopt : std::optional(int_of(k, v));
    else if (k == "num_train_epochs")
      s.num_train_epochs = int_of(k, v);
    else if (k == "num_input_tokens_seen")
      s.num_input_tokens_seen = int_of(k, v);
    else if (k == "total_flos")
      s.total_flos = number_of(k, v);
    else if (k == "log_history")
      s.log_history = history_of(v);
    else if (k == "best_metric")
      s.best_metric = v.is_null() ? std::nullopt : std::optional(number_of(k, v));
    else if (k == "best_model_checkpoint") {
      if (!v.is_null() && !v.is_string()) malformed(k, "is not a string");
      s.best_model_checkpoint = v.is_null() ? std::nullopt : std::optional(v.get<std::string>());
    } else if (k == "is_local_process_zero")
      s.is_local_process_zero = bool_of(k, v);
    else if (k == "is_world_process_zero")
      s.is_world_process_zero = bool_of(k, v);
    else if (k == "is_hyper_param_search")
      s.is_hyper_param_search = bool_of(k, v);
    else if (k == "trial_name")
      s.trial_name = v;
    else if (k == "trial_params")
      s.trial_params = v;
    else
      s.extra[k] = v;
  }
  return s;
}

void TrainerState::append_log(const std::map<std::string, double>& logs) {
  LogEntry e;
  for (const auto& [k, v] : logs) e[k] = Number::of_real(v);
  if (epoch) e["epoch"] = *epoch;
  e["step"] = Number::of_int(global_step);
  log_history.push_back(std::move(e));
}

}  // namespace accel::trainer
