// libaccel's side of accelerate_device_map_diff.py: one JSON case per input line (a module tree,
// max_memory, no_split, fallback_allocation), one JSON device map per output line ({"error": ...}
// when it fails).
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>

#include "bigmodel/device_map.hpp"
#include "common/error.hpp"

namespace {

using accel::bigmodel::ModuleTree;
using accel::bigmodel::TensorEntry;

std::vector<TensorEntry> tensors_of(const nlohmann::json& list) {
  std::vector<TensorEntry> out;
  for (const auto& t : list) out.push_back({t[0].get<std::string>(), t[1].get<int64_t>(), t[2]});
  return out;
}

ModuleTree tree_of(const nlohmann::json& j) {
  ModuleTree m;
  m.class_name = j["class"];
  m.params = tensors_of(j["params"]);
  m.buffers = tensors_of(j["buffers"]);
  for (const auto& c : j["children"])
    m.children.emplace_back(c[0].get<std::string>(), tree_of(c[1]));
  return m;
}

}  // namespace

int main() {
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    const auto c = nlohmann::json::parse(line);
    accel::bigmodel::DeviceMapOptions options;
    for (const auto& [device, bytes] : c["max_memory"].items()) options.max_memory[device] = bytes;
    for (const auto& n : c["no_split"]) options.no_split.insert(n.get<std::string>());
    options.fallback_allocation = c.value("fallback", false);
    nlohmann::json out = nlohmann::json::object();
    try {
      for (const auto& [name, device] :
           accel::bigmodel::infer_auto_device_map(tree_of(c["tree"]), options))
        out[name] = device;
    } catch (const accel::Error& e) {
      out = {{"error", e.what()}};
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}
