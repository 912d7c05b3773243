#include "bigmodel/map_request.hpp"

#include <cctype>
#include <sstream>

#include "checkpoint/safetensors.hpp"
#include "common/error.hpp"

namespace accel::bigmodel {

namespace {

// Splits on any of `seps`, dropping empty pieces.
std::vector<std::string> split(const std::string& text, const std::string& seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (seps.find(c) != std::string::npos) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

int64_t budget(const std::string& entry, const std::string& size) {
  if (size == "0") return 0;
  try {
    return static_cast<int64_t>(checkpoint::parse_size(size));
  } catch (const Error&) {
    fail(Errc::invalid_argument, "max_memory entry '" + entry + "': '" + size +
                                     "' is not a size such as 200MB, 1GiB or a byte count");
  }
}

void parse_max_memory(const std::string& value, MapRequest& r) {
  for (const auto& entry : split(value, ",")) {
    const auto colon = entry.find(':');
    const std::string device = entry.substr(0, colon);
    if (device == "disk" && colon == std::string::npos) {
      r.disk = true;
    } else if (device == "cpu" && colon != std::string::npos) {
      r.options.max_memory["cpu"] = budget(entry, entry.substr(colon + 1));
    } else {
      fail(Errc::invalid_argument, "max_memory entry '" + entry +
                                       "' is neither cpu:SIZE nor disk (libaccel's big-model "
                                       "inference runs on the CPU: no GPU or mps budgets)");
    }
  }
}

bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  fail(Errc::invalid_argument, key + " '" + v + "' is neither true nor false");
}

}  // namespace

MapRequest parse_map_request(const std::string& text) {
  MapRequest r;
  bool have_memory = false;
  for (std::string pair : split(text, " \t\n;")) {
    while (!pair.empty() && pair.back() == ',') pair.pop_back();
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    if (eq == std::string::npos)
      fail(Errc::invalid_argument, "option '" + pair + "' is not key=value");
    const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
    if (key == "max_memory") {
      parse_max_memory(value, r);
      have_memory = true;
    } else if (key == "no_split_module_classes") {
      for (const auto& c : split(value, ",")) r.options.no_split.insert(c);
    } else if (key == "fallback_allocation") {
      r.options.fallback_allocation = parse_bool(key, value);
    } else {
      fail(Errc::invalid_argument, "unknown option '" + key +
                                       "' (max_memory, no_split_module_classes, "
                                       "fallback_allocation)");
    }
  }
  if (!have_memory)
    fail(Errc::invalid_argument,
         "max_memory is required, e.g. max_memory=cpu:200MB,disk (libaccel does not guess the "
         "machine's free memory as Accelerate's get_max_memory does)");
  if (!r.options.max_memory.count("cpu") && !r.disk)
    fail(Errc::invalid_argument, "max_memory names neither cpu:SIZE nor disk");
  return r;
}

void check_fits(const DeviceMap& map, const std::map<std::string, int64_t>& sizes,
                const MapRequest& request) {
  if (request.disk) return;
  int64_t on_disk = 0;
  std::string first;
  for (const auto& [name, device] : map) {
    if (device != "disk") continue;
    const auto it = sizes.find(name);
    on_disk += it == sizes.end() ? 0 : it->second;
    if (first.empty()) first = name.empty() ? "the root" : "'" + name + "'";
  }
  if (on_disk == 0 && first.empty()) return;
  const auto total = sizes.count("") ? sizes.at("") : 0;
  const auto cpu =
      request.options.max_memory.count("cpu") ? request.options.max_memory.at("cpu") : 0;
  fail(Errc::out_of_memory,
       "the model does not fit: it needs " + std::to_string(total) +
           " bytes and max_memory gives cpu " + std::to_string(cpu) + " bytes and no disk; " +
           std::to_string(on_disk) + " bytes of modules (first " + first +
           ") would go to disk (the cpu budget also keeps room for the largest layer). Add disk to "
           "max_memory or raise cpu");
}

std::vector<std::string> map_lines(const DeviceMap& map) {
  std::vector<std::string> out;
  for (const auto& [name, device] : map) out.push_back(name + "=" + device);
  return out;
}

DeviceMap parse_map_lines(const std::string& text) {
  DeviceMap map;
  for (const auto& line : split(text, " \t\n;")) {
    const auto eq = line.rfind('=');
    const std::string device = eq == std::string::npos ? "" : line.substr(eq + 1);
    if (device != "cpu" && device != "disk")
      fail(Errc::invalid_argument,
           "device map entry '" + line + "' is not module=cpu or module=disk");
    map.emplace_back(line.substr(0, eq), device);
  }
  if (map.empty()) fail(Errc::invalid_argument, "the device map is empty");
  return map;
}

}  // namespace accel::bigmodel
