// Configuration layers and their resolution: defaults <- YAML file <- environment <- setters.
// Pure C++ (yaml-cpp only).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/keys.hpp"

namespace accel::config {

using EnvMap = std::map<std::string, std::string>;

// A snapshot of this process's environment.
EnvMap process_environment();

// A canonical value as YAML text that YAML 1.1 readers (PyYAML, so Accelerate) read back as the
// same value: YAML 1.1 words ('NO'), number-like text and YAML syntax are single-quoted; booleans,
// numbers and collections are written as they are.
std::string yaml_scalar(const KeySpec& spec, const std::string& value);

struct Setting {
  std::string value;
  Origin origin;
};

// Every key with its resolved value and the source it came from.
class Resolved {
 public:
  explicit Resolved(std::map<std::string, Setting> settings) : settings_(std::move(settings)) {}

  const Setting& at(const std::string& key) const;
  const std::string& text(const std::string& key) const { return at(key).value; }
  bool flag(const std::string& key) const { return text(key) == "true"; }
  long long integer(const std::string& key) const;
  double seconds(const std::string& key) const;

  // YAML, one key per line in table order, each followed by "# <source>".
  std::string dump_yaml() const;

 private:
  std::map<std::string, Setting> settings_;
};

class Config {
 public:
  // Validates and stores an explicit setting (the setter layer).
  void set(const std::string& key, const std::string& value);

  // Replaces the file layer with the contents of an Accelerate YAML/JSON file.
  void load_file(const std::string& path);
  // Same from text; `name` stands for the path in messages.
  void load_yaml_text(const std::string& text, const std::string& name);
  // Loads Accelerate's default file if one exists; returns its path or "" when there is none.
  std::string load_default_file(const EnvMap& env);

  const std::string& file_path() const { return file_path_; }

  // Merges the layers. Throws accel::Error for a bad or unsupported environment variable.
  Resolved resolve(const EnvMap& env) const;

 private:
  std::map<std::string, Setting> file_;
  std::map<std::string, Setting> setters_;
  std::string file_path_;
};

// Accelerate's default file locations in order of preference.
std::vector<std::string> default_file_candidates(const EnvMap& env);

// Environment variables of libaccel's own namespace (ACCEL_*) that are not configuration keys.
bool is_reserved_accel_variable(const std::string& name);

}  // namespace accel::config
