// Accelerate's infer_auto_device_map (utils/modeling.py, 1.15.0), on a description of a module
// tree: which device (GPU index, "mps", "cpu" or "disk") each module's weights go to, greedily in
// module order, keeping room on the main device for the largest layer, never splitting the
// no_split classes, keeping tied parameters together. The same answers as Accelerate, quirks
// included (its tie test is a substring test; its split test is >= where its fit test is <=):
// tests/unit/accelerate_device_map_diff.py compares them on Accelerate's test cases and on random
// trees. Pure logic.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace accel::bigmodel {

// A parameter or buffer: its bytes, and an identity shared by the names of one tied tensor.
struct TensorEntry {
  std::string name;  // local: "weight"
  int64_t bytes = 0;
  int64_t id = 0;
};

// A module as torch.nn lists it: its own parameters, its children, its own buffers, in order.
struct ModuleTree {
  std::string class_name;
  std::vector<TensorEntry> params, buffers;
  std::vector<std::pair<std::string, ModuleTree>> children;
};

struct DeviceMapOptions {
  // Device -> bytes: integers (GPUs) in any order, "mps", "cpu", "disk"; ordered as Accelerate
  // orders them (GPUs sorted, then mps, cpu, disk). Without "cpu" the CPU is not used; "disk" is
  // always there and takes everything.
  std::map<std::string, int64_t> max_memory;
  std::set<std::string> no_split;  // module class names
  bool fallback_allocation = false;
  bool clean_result = true;
};

// Module name -> device, in Accelerate's dict order (clean_device_map moves merged names last).
using DeviceMap = std::vector<std::pair<std::string, std::string>>;

// Accelerate's compute_module_sizes: bytes of every tensor added to each prefix of its name; a
// tied tensor counts once, under its first name in named_parameters order.
std::map<std::string, int64_t> compute_module_sizes(const ModuleTree& root);
// Accelerate's find_tied_parameters: groups of the names of one parameter, each sorted.
std::vector<std::vector<std::string>> find_tied_parameters(const ModuleTree& root);
// Accelerate's clean_device_map: a module whose every entry shares one device becomes one entry.
void clean_device_map(DeviceMap& map, const std::string& module_name = "");
// Throws accel::Error(invalid_argument) for a device that is none of the above.
DeviceMap infer_auto_device_map(const ModuleTree& root, const DeviceMapOptions& options);

}  // namespace accel::bigmodel
