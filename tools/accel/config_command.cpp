#include "config_command.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "config/config.hpp"
#include "questionnaire.hpp"

namespace accel::cli {

namespace {

namespace fs = std::filesystem;

// Python Accelerate's ClusterConfig fields (1.x) that libaccel knows. The optional ones default to
// None there and are written only when set; the others are filled with their defaults by
// `config update`. Keys of the table not listed here are libaccel's own: Accelerate refuses them,
// so they are written only when the user's file has them.
struct AccelerateKey {
  const char* name;
  bool optional;
};
constexpr AccelerateKey kAccelerateKeys[] = {
    {"compute_environment", false},
    {"debug", false},
    {"distributed_type", false},
    {"downcast_bf16", false},
    {"enable_cpu_affinity", false},
    {"gpu_ids", true},
    {"machine_rank", false},
    {"main_process_ip", true},
    {"main_process_port", true},
    {"main_training_function", false},
    {"mixed_precision", false},
    {"num_machines", false},
    {"num_processes", false},
    {"rdzv_backend", false},
    {"same_network", false},
    {"use_cpu", false},
    {"tpu_name", true},
    {"tpu_zone", true},
    {"tpu_vm", true},
    {"tpu_env", true},
    {"tpu_use_cluster", false},
    {"tpu_use_sudo", false},
    {"command_file", true},
    {"commands", true},
    // Sections (fsdp_config, ...): Accelerate drops an empty one; the questionnaire writes
    // deepspeed_config when DeepSpeed is chosen (render() writes a section as Accelerate does).
};

const AccelerateKey* accelerate_key(const std::string& name) {
  for (const auto& k : kAccelerateKeys)
    if (name == k.name) return &k;
  return nullptr;
}

const config::KeySpec& spec_of(const std::string& name) {
  const config::KeySpec* spec = config::find_key(name);
  if (!spec) fail(Errc::internal, "configuration key '" + name + "' is not in the table");
  return *spec;
}

// How downcast_bf16 (off: libaccel has no TPU) is written: Accelerate's questionnaire writes the
// text 'no', its dataclass and `accelerate config default` the boolean false. PyYAML reads the two
// as different values, so each writer says which one it writes.
enum class Downcast { kText, kBool };

// A section ("{a: 1, b: none}", as the configuration layer reads one back) as Accelerate's JSON
// has it: numbers, booleans and text, lists and maps inside.
nlohmann::json section_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : node) j[kv.first.Scalar()] = section_json(kv.second);
    return j;
  }
  if (node.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& item : node) j.push_back(section_json(item));
    return j;
  }
  if (node.IsNull()) return nullptr;
  const std::string& v = node.Scalar();
  long long n = 0;
  if (parse_int(v, &n)) return n;
  if (v == "true" || v == "false") return v == "true";
  return v;
}

// A node read from flow text keeps that style when emitted; PyYAML writes sections in block style.
void block_style(YAML::Node node) {
  if (!node.IsMap() && !node.IsSequence()) return;
  node.SetStyle(YAML::EmitterStyle::Block);
  for (auto it = node.begin(); it != node.end(); ++it) block_style(node.IsMap() ? it->second : *it);
}

std::string render(const FileEntries& entries, bool json, Downcast downcast) {
  auto as_no = [downcast](const std::string& key, const std::string& value) {
    return downcast == Downcast::kText && key == "downcast_bf16" && value == "false";
  };
  if (json) {
    nlohmann::json j = nlohmann::json::object();  // std::map underneath: sorted keys
    for (const auto& [key, value] : entries) {
      const auto& spec = spec_of(key);
      long long n = 0;
      if (as_no(key, value))
        j[key] = "no";
      else if (spec.kind == config::Kind::kBool)
        j[key] = value == "true";
      else if (spec.kind == config::Kind::kInt && parse_int(value, &n))
        j[key] = n;
      else if (spec.kind == config::Kind::kMap && value != "{}") {
        j[key] = section_json(YAML::Load(value));
      } else if (spec.kind == config::Kind::kMap || spec.kind == config::Kind::kList ||
                 spec.kind == config::Kind::kSeconds)
        j[key] = nlohmann::json::parse(value);  // "[]", "{}" or a number: normalized already
      else
        j[key] = value;
    }
    try {
      return j.dump(2) + "\n";
    } catch (const nlohmann::json::exception& e) {  // text that is not UTF-8
      fail(Errc::config, std::string("cannot write the configuration as JSON: ") + e.what());
    }
  }
  std::ostringstream y;
  for (const auto& [key, value] : entries) {
    const auto& spec = spec_of(key);
    if (spec.kind == config::Kind::kMap && value != "{}") {  // block style, as PyYAML writes it
      YAML::Node section = YAML::Load(value);
      block_style(section);
      YAML::Emitter block;
      block << section;
      std::istringstream lines(block.c_str());
      y << key << ":\n";
      for (std::string line; std::getline(lines, line);) y << "  " << line << "\n";
      continue;
    }
    y << key << ": " << (as_no(key, value) ? "'no'" : config::yaml_scalar(spec, value)) << "\n";
  }
  return y.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void write_all(int fd, const std::string& text, const std::string& name) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Errc::io, "cannot write '" + name + "': " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

// Writes `entries` to `path` as a whole or not at all: a temporary file beside it, loaded back
// through the configuration layer (which must read every value as given), then renamed over it.
// Returns the path written (a symbolic link's target: the link stays, as when Python writes it).
std::string write_config_file(const std::string& path, const FileEntries& entries,
                              Downcast downcast) {
  fs::path target(path);
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    const fs::path resolved = fs::weakly_canonical(target, ec);
    if (!ec) target = resolved;
  }
  if (fs::is_directory(target, ec)) fail(Errc::io, "'" + path + "' is a directory");
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(dir, ec);
  if (ec) fail(Errc::io, "cannot create directory '" + dir.string() + "': " + ec.message());

  std::string name = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = mkstemp(name.data());
  if (fd < 0)
    fail(Errc::io, "cannot create a file in '" + dir.string() + "': " + std::strerror(errno));
  struct Remove {
    std::string name;
    bool keep = false;
    ~Remove() {
      if (!keep) ::unlink(name.c_str());
    }
  } remove{name};
  {
    // mkstemp makes the file 0600; the file gets the mode it had, or what open() would give it.
    struct stat st;
    mode_t mode = 0;
    if (::stat(target.c_str(), &st) == 0) {
      mode = st.st_mode & 07777;
    } else {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      mode = 0666 & ~mask;
    }
    ::fchmod(fd, mode);
    try {
      write_all(fd, render(entries, ends_with(target.string(), ".json"), downcast), name);
    } catch (...) {
      ::close(fd);
      throw;
    }
    const bool synced = ::fsync(fd) == 0;
    if (::close(fd) != 0 || !synced)
      fail(Errc::io, "cannot write '" + name + "': " + std::strerror(errno));
  }

  try {
    config::Config check;
    check.load_file(name);
    const auto resolved = check.resolve({});
    for (const auto& [key, value] : entries)
      if (resolved.text(key) != value)
        fail(Errc::internal, "key '" + key + "' reads back as '" + resolved.text(key) +
                                 "' instead of '" + value + "'");
  } catch (const Error& e) {
    fail(Errc::internal, "the configuration written for '" + target.string() +
                             "' does not load back (" + e.what() + "); nothing was written");
  }

  if (::rename(name.c_str(), target.c_str()) != 0)
    fail(Errc::io, "cannot replace '" + target.string() + "': " + std::strerror(errno));
  remove.keep = true;
  // The rename itself is durable once the directory is synced.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return target.string();
}

std::string default_path(const config::EnvMap& env) {
  const auto candidates = config::default_file_candidates(env);
  if (candidates.empty())
    fail(Errc::io,
         "no default configuration file location: none of HF_HOME, XDG_CACHE_HOME and "
         "HOME is set; pass --config_file");
  return candidates.front();
}

int run_config_show(const std::string& config_file) {
  const auto env = config::process_environment();
  config::Config cfg;
  if (!config_file.empty())
    cfg.load_file(config_file);
  else
    cfg.load_default_file(env);
  std::fputs(cfg.resolve(env).dump_yaml().c_str(), stdout);
  return 0;
}

// `accelerate config`: the questions, then the file, written only once every answer is in.
int run_config_questionnaire(std::string path) {
  if (path.empty()) path = default_path(config::process_environment());
  // A directory is refused before the questions, not after them.
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(Errc::io, "'" + path + "' is a directory");
  Prompter prompter(std::cin, std::cout, !::isatty(STDIN_FILENO));
  const FileEntries entries = run_questionnaire(prompter);
  const bool existed = fs::exists(fs::symlink_status(path));
  const std::string written = write_config_file(path, entries, Downcast::kText);
  std::cout << "accelerate configuration saved at " << written
            << (existed ? " (replacing the previous file)" : "") << std::endl;
  return 0;
}

// The form of downcast_bf16 in a file that loaded: text when quoted ('no', "no"), else (a boolean,
// or no such key: Accelerate's default is False) the boolean.
Downcast downcast_form_in(const std::string& path) {
  try {
    const YAML::Node node = YAML::LoadFile(path)["downcast_bf16"];
    if (node && node.IsScalar() && node.Tag() == "!") return Downcast::kText;
  } catch (const YAML::Exception&) {
    // Loaded a moment ago; changed since. The boolean is as good a form as any.
  }
  return Downcast::kBool;
}

// `accelerate config update`: the user's values kept, the keys the current version writes filled
// in with their defaults. Unknown keys and unsupported values are the loader's errors.
int run_config_update(std::string path) {
  if (path.empty()) path = default_path(config::process_environment());
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail(Errc::io, "no configuration file at '" + path +
                       "' to update; write one with `accel config` or `accel config default`");
  // Every key named above must be a file key of the table: a rename there must not drop one here.
  for (const auto& k : kAccelerateKeys)
    if (!spec_of(k.name).in_file)
      fail(Errc::internal, std::string("Accelerate key '") + k.name + "' is not a file key");
  config::Config cfg;
  cfg.load_file(path);
  // The file over the defaults only: the environment (ACCELERATE_*) is not the file's content.
  const auto resolved = cfg.resolve({});
  FileEntries entries;
  std::string added, own;
  for (const auto& spec : config::key_table()) {
    if (!spec.in_file) continue;
    const auto& setting = resolved.at(spec.name);
    const bool in_file = setting.origin.source == config::Source::kFile;
    if (spec.kind == config::Kind::kMap && setting.value == "{}") continue;
    const AccelerateKey* k = accelerate_key(spec.name);
    if (in_file || (k && !k->optional)) {
      entries[spec.name] = setting.value;
      if (!in_file) added += (added.empty() ? "" : ", ") + std::string(spec.name);
      if (!k) own += (own.empty() ? "" : ", ") + std::string(spec.name);
    }
  }
  const std::string written = write_config_file(path, entries, downcast_form_in(path));
  std::printf("Successfully updated the configuration file at %s.\n", written.c_str());
  if (!added.empty()) std::printf("Added with their default values: %s\n", added.c_str());
  if (!own.empty())
    std::printf("Kept libaccel's own keys, which Python Accelerate refuses in its files: %s\n",
                own.c_str());
  return 0;
}

// Writes a file Python Accelerate reads as well (only Accelerate's own keys).
int run_config_default(std::string path, const std::string& mixed_precision, int num_processes) {
  if (path.empty()) path = default_path(config::process_environment());
  if (fs::exists(fs::symlink_status(path)))
    fail(Errc::io, "'" + path + "' exists already; not overwriting it");
  if (num_processes < 1) fail(Errc::invalid_argument, "--num_processes must be at least 1");
  const std::string mp = config::normalize(spec_of("mixed_precision"), mixed_precision,
                                           {config::Source::kSetter, "--mixed_precision"});
  FileEntries e;
  e["compute_environment"] = "LOCAL_MACHINE";
  e["debug"] = "false";
  e["distributed_type"] = num_processes > 1 ? "MULTI_CPU" : "NO";
  e["downcast_bf16"] = "false";  // written as Accelerate's `config default` writes it: false
  e["enable_cpu_affinity"] = "false";
  e["machine_rank"] = "0";
  e["main_training_function"] = "main";
  e["mixed_precision"] = mp;
  e["num_machines"] = "1";
  e["num_processes"] = std::to_string(num_processes);
  e["rdzv_backend"] = "static";
  e["same_network"] = "true";
  e["tpu_env"] = "[]";
  e["tpu_use_cluster"] = "false";
  e["tpu_use_sudo"] = "false";
  e["use_cpu"] = "true";
  const std::string written = write_config_file(path, e, Downcast::kBool);
  std::printf("accelerate configuration saved at %s\n", written.c_str());
  return 0;
}

struct ConfigOptions {
  std::string ask_file, show_file, update_file;
  std::string default_file, default_mp = "no";
  int default_np = 1;
};

}  // namespace

ConfigCommand add_config_command(CLI::App& app) {
  auto opts = std::make_shared<ConfigOptions>();
  auto* config = app.add_subcommand(
      "config",
      "Answer questions to write Accelerate's configuration file (as `accelerate "
      "config`), or show, write a default or update one");
  config->require_subcommand(0, 1);
  config->add_option("--config_file,--config-file", opts->ask_file,
                     "Where to write the file (default: Accelerate's default file)");
  auto* show = config->add_subcommand("show", "Print the effective configuration with sources");
  show->add_option("--config_file,--config-file", opts->show_file, "Configuration file");
  auto* def = config->add_subcommand("default", "Write a default configuration file");
  def->add_option("--config_file,--config-file", opts->default_file, "Where to write it");
  def->add_option("--mixed_precision,--mixed-precision", opts->default_mp, "no, fp16 or bf16");
  def->add_option("--num_processes,--num-processes", opts->default_np, "Processes");
  auto* update = config->add_subcommand(
      "update", "Rewrite a configuration file with every key of this version, keeping its values");
  update->add_option("--config_file,--config-file", opts->update_file,
                     "The file to update (default: Accelerate's default file)");
  ConfigCommand out;
  out.command = config;
  out.run = [opts, show, def, update]() -> int {
    // `accel config --config_file F show` names the file as well as `accel config show
    // --config_file F`.
    auto file = [&opts](const std::string& own) { return own.empty() ? opts->ask_file : own; };
    if (show->parsed()) return run_config_show(file(opts->show_file));
    if (def->parsed())
      return run_config_default(file(opts->default_file), opts->default_mp, opts->default_np);
    if (update->parsed()) return run_config_update(file(opts->update_file));
    return run_config_questionnaire(opts->ask_file);
  };
  return out;
}

}  // namespace accel::cli
