#include "config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/parse.hpp"

extern char** environ;

namespace accel::config {

namespace {

// YAML 1.1 reads these unquoted words as booleans or null, and number-like text as numbers
// (PyYAML, so Accelerate, would get 0.5 or 10 instead of the text); Accelerate quotes them ('no').
bool needs_quotes(const std::string& v) {
  static const char* words[] = {"no", "yes", "on", "off", "true", "false", "null", "y", "n", "~"};
  if (v.empty()) return true;
  std::string lowered;
  for (char c : v) lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* w : words)
    if (lowered == w) return true;
  // Every YAML 1.1 number starts with a digit, or with a sign or point and then one (or .inf).
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  if (digit(v[0]) || (v.size() > 1 && std::strchr("+-.", v[0]) && (digit(v[1]) || v[1] == '.')) ||
      lowered == ".inf" || lowered == "+.inf" || lowered == "-.inf" || lowered == ".nan")
    return true;
  return v.find_first_of(":#'\"{}[],&*!|>%@`-?") != std::string::npos || v.front() == ' ' ||
         v.back() == ' ';
}

// A configuration file is small: anything larger, or anything that is not a regular file
// (a directory, /dev/zero, a FIFO), is refused before it is read.
constexpr std::streamsize kMaxConfigFileBytes = 1 << 20;

void set_flow_style(YAML::Node node) {
  if (!node.IsMap() && !node.IsSequence()) return;
  node.SetStyle(YAML::EmitterStyle::Flow);
  for (auto it = node.begin(); it != node.end(); ++it)
    set_flow_style(node.IsMap() ? it->second : *it);
}

// Flow-style text of a YAML node (one line, whatever style the file used: a node keeps its own
// style, which the emitter's Flow manipulator does not override), for a non-empty map or list.
std::string flow_text(const YAML::Node& node) {
  YAML::Node copy = YAML::Clone(node);
  set_flow_style(copy);
  YAML::Emitter e;
  e << copy;
  return e.c_str();
}

// The value of a file entry as text for normalize(): scalars as written, collections as flow YAML.
std::string node_text(const KeySpec& spec, const YAML::Node& node) {
  if (node.IsNull()) return "";
  if (node.IsScalar()) return node.Scalar();
  if (node.size() == 0) return spec.kind == Kind::kList ? "[]" : "{}";
  // An explicit "no dynamo" section is what Accelerate writes when dynamo is off.
  if (std::string(spec.name) == "dynamo_config" && node.IsMap() && node.size() == 1 &&
      node["dynamo_backend"] && node["dynamo_backend"].IsScalar()) {
    std::string backend = node["dynamo_backend"].Scalar();
    for (auto& c : backend) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (backend == "no") return "{}";
  }
  // Likewise `ipex_config: {ipex: false}`: every entry off is no IPEX.
  if (std::string(spec.name) == "ipex_config" && node.IsMap()) {
    bool all_off = true;
    for (const auto& kv : node) {
      bool on = true;
      all_off = all_off && kv.second.IsScalar() && parse_bool(kv.second.Scalar(), &on) && !on;
    }
    if (all_off) return "{}";
  }
  return flow_text(node);
}

}  // namespace

std::string yaml_scalar(const KeySpec& spec, const std::string& v) {
  if (spec.kind == Kind::kMap || spec.kind == Kind::kList || spec.kind == Kind::kBool ||
      spec.kind == Kind::kInt || spec.kind == Kind::kSeconds)
    return v;
  if (!needs_quotes(v)) return v;
  std::string out = "'";
  for (char c : v) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

EnvMap process_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

bool is_reserved_accel_variable(const std::string& name) {
  static const char* reserved[] = {
      "ACCEL_CONFIG_FILE",   // the file `accel launch` resolved, for its ranks
      "ACCEL_RUN_ID",        // the job's id: prefixes every rendezvous key
      "ACCEL_STORE_HOSTED",  // 1: the launcher hosts the TCPStore, every rank is a client
      "ACCEL_STORE_FD",      // rank 0's inherited socket for the store (LibTorch 2.x)
      "ACCEL_LIB_DIR",       // where the bindings' build scripts look for libaccel
      "ACCEL_BIN",           // the accel command, for tests and bindings
  };
  for (const char* r : reserved)
    if (name == r) return true;
  return false;
}

const Setting& Resolved::at(const std::string& key) const {
  auto it = settings_.find(key);
  if (it == settings_.end())
    fail(Errc::config, unknown_key_message(key, Origin{Source::kSetter, ""}));
  return it->second;
}

// The values were validated by normalize(); parse.hpp reads them the same way under any locale
// (std::stod("0.5") is 0 where the C locale's decimal point is a comma).
long long Resolved::integer(const std::string& key) const {
  long long v = 0;
  if (!parse_int(text(key), &v))
    fail(Errc::config, "configuration key '" + key + "' is not an integer: '" + text(key) + "'");
  return v;
}

double Resolved::seconds(const std::string& key) const {
  double v = 0;
  if (!parse_real(text(key), &v))
    fail(Errc::config,
         "configuration key '" + key + "' is not a number of seconds: '" + text(key) + "'");
  return v;
}

std::string Resolved::dump_yaml() const {
  std::ostringstream out;
  for (const auto& spec : key_table()) {
    const Setting& s = at(spec.name);
    // Keys that only the environment sets are shown as comments, so that the dump loads back.
    std::string line =
        std::string(spec.in_file ? "" : "# ") + spec.name + ": " + yaml_scalar(spec, s.value);
    if (line.size() < 44) line.append(44 - line.size(), ' ');
    out << line << "  # " << s.origin.describe() << "\n";
  }
  return out.str();
}

void Config::set(const std::string& key, const std::string& value) {
  const Origin origin{Source::kSetter, ""};
  const KeySpec* spec = find_key(key);
  if (!spec) fail(Errc::config, unknown_key_message(key, origin));
  setters_[key] = Setting{normalize(*spec, value, origin), origin};
}

void Config::load_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    fail(Errc::io, "cannot read configuration file '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(Errc::io, "configuration file '" + path + "' is not a regular file" +
                       (S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::io, "cannot read configuration file '" + path + "'");
  // Read at most one byte past the limit: the file may grow (or lie about its size) meanwhile.
  std::string text(static_cast<size_t>(kMaxConfigFileBytes) + 1, '\0');
  in.read(text.data(), kMaxConfigFileBytes + 1);
  if (in.bad()) fail(Errc::io, "error while reading configuration file '" + path + "'");
  if (in.gcount() > kMaxConfigFileBytes)
    fail(Errc::io, "configuration file '" + path + "' is larger than " +
                       std::to_string(kMaxConfigFileBytes) + " bytes; not a configuration");
  text.resize(static_cast<size_t>(in.gcount()));
  load_yaml_text(text, path);
}

void Config::load_yaml_text(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(Errc::config, "configuration file " + name + ":" + std::to_string(e.mark.line + 1) +
                           ": not valid YAML: " + e.msg);
  }
  std::map<std::string, Setting> layer;
  if (!root.IsNull()) {
    if (!root.IsMap())
      fail(Errc::config, "configuration file " + name +
                             ": expected a mapping of keys to values at the top level");
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : flow_text(it->first);
      const Origin origin{Source::kFile, name + ":" + std::to_string(it->first.Mark().line + 1)};
      if (key == "fp16") {  // Accelerate's legacy spelling of mixed_precision: fp16
        bool on = false;
        if (!it->second.IsScalar() || !parse_bool(it->second.Scalar(), &on))
          fail(Errc::config, "configuration key 'fp16' (" + origin.describe() +
                                 "): invalid value; allowed: true/false");
        if (on) layer["mixed_precision"] = Setting{"fp16", origin};
        continue;
      }
      const KeySpec* spec = find_key(key);
      if (!spec) fail(Errc::config, unknown_key_message(key, origin));
      if (!spec->in_file) {
        std::string vars;
        for (const char* v : spec->env) vars += (vars.empty() ? "" : ", ") + std::string(v);
        fail(Errc::config, "configuration key '" + key + "' (" + origin.describe() +
                               ") is set only through the environment (" + vars +
                               "), not in a file");
      }
      if (layer.count(key))
        fail(Errc::config, "configuration key '" + key + "' (" + origin.describe() +
                               ") appears twice in the file");
      layer[key] = Setting{normalize(*spec, node_text(*spec, it->second), origin), origin};
    }
  }
  file_ = std::move(layer);
  file_path_ = name;
}

std::string Config::load_default_file(const EnvMap& env) {
  for (const auto& candidate : default_file_candidates(env)) {
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0) {
      load_file(candidate);
      return candidate;
    }
  }
  return "";
}

Resolved Config::resolve(const EnvMap& env) const {
  // A variable one or two letters away from one libaccel reads is almost surely a typo that would
  // otherwise be ignored in silence. Other ACCEL_ names may belong to anything and are left alone.
  for (const auto& [name, value] : env) {
    if (name.rfind("ACCEL_", 0) != 0 || is_reserved_accel_variable(name)) continue;
    for (const auto& spec : key_table())
      for (const char* var : spec.env) {
        const size_t d = edit_distance(name, var);
        if (d > 0 && d <= 2)
          fail(Errc::config, "unknown environment variable " + name + " (did you mean " + var +
                                 "? It sets configuration key '" + spec.name + "')");
      }
  }
  std::map<std::string, Setting> out;
  for (const auto& spec : key_table()) {
    Setting s{spec.default_value, Origin{}};
    if (auto f = file_.find(spec.name); f != file_.end()) s = f->second;
    for (const char* var : spec.env) {
      auto e = env.find(var);
      if (e == env.end()) continue;
      const Origin origin{Source::kEnv, var};
      s = Setting{normalize(spec, e->second, origin), origin};
      break;
    }
    if (auto p = setters_.find(spec.name); p != setters_.end()) s = p->second;
    out[spec.name] = s;
  }
  return Resolved(std::move(out));
}

std::vector<std::string> default_file_candidates(const EnvMap& env) {
  // As Accelerate: HF_HOME wins, else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface. It is
  // one location, not a search: a file under a lower-priority directory is not read.
  auto get = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::string home;
  if (!get("HF_HOME").empty()) {
    home = get("HF_HOME");
  } else if (!get("XDG_CACHE_HOME").empty()) {
    home = get("XDG_CACHE_HOME") + "/huggingface";
  } else if (!get("HOME").empty()) {
    home = get("HOME") + "/.cache/huggingface";
  } else {
    return {};
  }
  return {home + "/accelerate/default_config.yaml"};
}

}  // namespace accel::config
