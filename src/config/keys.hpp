// The table of configuration keys: Accelerate's YAML keys plus libaccel's own, each with its type,
// allowed values, default and environment variables. Pure C++: no LibTorch.
#pragma once

#include <string>
#include <vector>

namespace accel::config {

enum class Source { kDefault, kFile, kEnv, kSetter };

// Where a value came from, for error messages and the effective-config dump.
struct Origin {
  Source source = Source::kDefault;
  std::string where;  // "path:line" for a file, the variable name for env, empty otherwise
  std::string describe() const;
};

enum class Kind { kString, kBool, kInt, kSeconds, kEnum, kMap, kList };

struct KeySpec {
  const char* name;
  Kind kind;
  const char* default_value;
  std::vector<const char*> allowed{};  // kEnum: the supported values, canonical spelling
  std::vector<const char*>
      unsupported{};               // kEnum: Accelerate values this build rejects as unsupported
  std::vector<const char*> env{};  // environment variables that set the key
  long long min = 0, max = 0;      // kInt bounds (inclusive)
  bool in_file = true;             // false: set by environment or setter only
  // Known Accelerate keys without support: only this neutral value is accepted ("false", "", "no").
  const char* neutral_only = nullptr;
  const char* unsupported_why = nullptr;
};

const std::vector<KeySpec>& key_table();
const KeySpec* find_key(const std::string& name);

// Validates `raw` for `spec` and returns the canonical text. Throws accel::Error (config or
// unsupported) naming the key, the origin and the allowed values.
std::string normalize(const KeySpec& spec, const std::string& raw, const Origin& origin);

// Accelerate's boolean spellings (y/yes/t/true/on/1, n/no/f/false/off/0), any case.
bool parse_bool(const std::string& text, bool* out);

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

// Names of all keys, comma separated, plus the closest one to `unknown` when it is a likely typo.
std::string unknown_key_message(const std::string& unknown, const Origin& origin);

}  // namespace accel::config
