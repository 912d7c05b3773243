#include "bigmodel/device_map.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>

#include "common/error.hpp"

namespace accel::bigmodel {
namespace {

// An entry of Accelerate's modules_to_treat: a module, or a bare parameter or buffer (null).
struct Entry {
  std::string name;
  const ModuleTree* module = nullptr;
};

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// torch's named_modules order (pre-order), each module's own tensors of one kind.
void each_tensor(const ModuleTree& m, const std::string& prefix, bool buffers,
                 const std::function<void(const std::string&, const TensorEntry&)>& f) {
  for (const TensorEntry& t : buffers ? m.buffers : m.params) f(join(prefix, t.name), t);
  for (const auto& [name, child] : m.children) each_tensor(child, join(prefix, name), buffers, f);
}

// Accelerate's `name + "." in k + "."`: a substring test, which also matches "0" in "10.weight".
bool mentions(const std::string& k, const std::string& name) {
  return (k + ".").find(name + ".") != std::string::npos;
}

int64_t size_of(const std::map<std::string, int64_t>& sizes, const std::string& name) {
  const auto it = sizes.find(name);
  return it == sizes.end() ? 0 : it->second;  // Accelerate's defaultdict(int)
}

// A module's own parameters, then its children, named under `name` (what a split puts in place).
std::vector<Entry> split_of(const std::string& name, const ModuleTree& m) {
  std::vector<Entry> out;
  for (const TensorEntry& p : m.params) out.push_back({join(name, p.name), nullptr});
  for (const auto& [child_name, child] : m.children)
    out.push_back({join(name, child_name), &child});
  return out;
}

bool unsplittable(const Entry& e, const std::set<std::string>& no_split) {
  return !e.module || e.module->children.empty() || no_split.count(e.module->class_name) > 0;
}

// Accelerate's get_max_layer_size: layers are leaves or no_split modules, depth first.
std::pair<int64_t, std::vector<std::string>> max_layer(std::vector<Entry> work,
                                                       const std::map<std::string, int64_t>& sizes,
                                                       const std::set<std::string>& no_split) {
  int64_t max_size = 0;
  std::vector<std::string> names;
  while (!work.empty()) {
    const Entry e = work.front();
    work.erase(work.begin());
    if (unsplittable(e, no_split)) {
      const int64_t size = size_of(sizes, e.name);
      if (size > max_size) {
        max_size = size;
        names = {e.name};
      } else if (size == max_size) {
        names.push_back(e.name);
      }
      continue;
    }
    std::vector<Entry> children;
    for (const auto& [n, c] : e.module->children) children.push_back({join(e.name, n), &c});
    work.insert(work.begin(), children.begin(), children.end());
  }
  return {max_size, names};
}

std::vector<Entry> module_entries(const std::vector<Entry>& entries) {
  std::vector<Entry> out;
  for (const Entry& e : entries)
    if (e.module) out.push_back(e);
  return out;
}

// The tied parameters outside `name` that belong with it: the other names of the groups that
// mention it without being all inside it.
std::vector<std::string> tied_outside(const std::string& name,
                                      const std::vector<std::vector<std::string>>& tied) {
  std::vector<std::string> out;
  for (const auto& group : tied) {
    const bool any = std::any_of(group.begin(), group.end(),
                                 [&](const std::string& k) { return mentions(k, name); });
    const bool all = std::all_of(group.begin(), group.end(),
                                 [&](const std::string& k) { return mentions(k, name); });
    if (!any || all) continue;
    for (const std::string& p : group)
      if (!mentions(p, name)) out.push_back(p);
  }
  return out;
}

struct WithTies {
  int64_t size = 0;
  std::vector<Entry> modules;  // the entries holding the tied parameters, in their order
};

// Accelerate's get_module_size_with_ties: each tied parameter's entry is the first one whose name
// prefixes it; none is Accelerate's IndexError, an internal error here.
WithTies size_with_ties(const std::vector<std::string>& tied_params, int64_t module_size,
                        const std::map<std::string, int64_t>& sizes,
                        const std::vector<Entry>& entries) {
  WithTies w{module_size, {}};
  for (const std::string& p : tied_params) {
    const auto it = std::find_if(entries.begin(), entries.end(),
                                 [&](const Entry& e) { return p.rfind(e.name + ".", 0) == 0; });
    if (it == entries.end())
      fail(Errc::invalid_argument,
           "device map: no module still to place holds the tied parameter '" + p +
               "' (Accelerate 1.15 fails here as well, with IndexError: its test of which ties "
               "concern a module matches names by substring, and a tied module may already be "
               "placed)");
    w.modules.push_back(*it);
    w.size += size_of(sizes, it->name) - size_of(sizes, p);
  }
  return w;
}

}  // namespace

std::map<std::string, int64_t> compute_module_sizes(const ModuleTree& root) {
  std::map<std::string, int64_t> sizes;
  std::set<int64_t> seen;
  auto add = [&](const std::string& name, const TensorEntry& t) {
    if (!seen.insert(t.id).second) return;  // a tied name: counted under its first
    sizes[""] += t.bytes;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1))
      sizes[name.substr(0, dot)] += t.bytes;
    sizes[name] += t.bytes;
  };
  each_tensor(root, "", false, add);
  each_tensor(root, "", true, add);
  return sizes;
}

std::vector<std::vector<std::string>> find_tied_parameters(const ModuleTree& root) {
  std::map<int64_t, std::vector<std::string>> by_id;
  std::vector<int64_t> order;  // ids by their first name's place in named_parameters
  each_tensor(root, "", false, [&](const std::string& name, const TensorEntry& t) {
    auto& names = by_id[t.id];
    if (names.empty()) order.push_back(t.id);
    names.push_back(name);
  });
  std::vector<std::vector<std::string>> groups;
  for (int64_t id : order) {
    auto names = by_id[id];
    if (names.size() < 2) continue;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.size() > 1) groups.push_back(names);
  }
  return groups;
}

void clean_device_map(DeviceMap& map, const std::string& module_name) {
  const std::string prefix = module_name.empty() ? "" : module_name + ".";
  auto under = [&](const std::string& k) { return k.rfind(prefix, 0) == 0; };
  std::set<std::string> values;
  size_t count = 0;
  for (const auto& [k, v] : map)
    if (under(k)) values.insert(v), ++count;
  if (values.size() == 1 && count > 1) {
    const std::string value = *values.begin();
    map.erase(
        std::remove_if(map.begin(), map.end(), [&](const auto& kv) { return under(kv.first); }),
        map.end());
    map.emplace_back(module_name, value);
  }
  // The next level's names: Accelerate's ".".join(k.split(".")[:idx]).
  const size_t keep =
      module_name.empty()
          ? 1
          : static_cast<size_t>(std::count(module_name.begin(), module_name.end(), '.')) + 2;
  std::set<std::string> children;
  for (const auto& [k, v] : map) {
    if (!under(k) || k.size() <= module_name.size()) continue;
    size_t cut = 0, parts = 0;
    for (size_t at = 0; at <= k.size(); ++at)
      if (at == k.size() || k[at] == '.') {
        cut = at;
        if (++parts == keep) break;
      }
    children.insert(k.substr(0, cut));
  }
  for (const std::string& child : children) clean_device_map(map, child);
}

namespace {

// Accelerate's device order: GPUs by index, then mps, cpu, disk (always there).
std::vector<std::string> device_order(const std::map<std::string, int64_t>& max_memory) {
  std::vector<std::pair<long long, std::string>> gpus;
  for (const auto& [device, bytes] : max_memory) {
    if (device == "mps" || device == "cpu" || device == "disk") continue;
    const bool digits = !device.empty() && std::all_of(device.begin(), device.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!digits)
      fail(Errc::invalid_argument, "Device " + device +
                                       " is not recognized, available devices are integers(for "
                                       "GPU/XPU), 'mps', 'cpu' and 'disk'");
    gpus.emplace_back(std::stoll(device), device);
  }
  std::sort(gpus.begin(), gpus.end());
  std::vector<std::string> devices;
  for (const auto& g : gpus) devices.push_back(g.second);
  for (const char* d : {"mps", "cpu", "disk"})
    if (max_memory.count(d)) devices.push_back(d);
  if (!max_memory.count("disk")) devices.push_back("disk");
  return devices;
}

std::vector<std::string> main_devices_of(const std::vector<std::string>& devices) {
  std::vector<std::string> gpus;
  for (const auto& d : devices)
    if (d != "cpu" && d != "disk") gpus.push_back(d);
  if (std::find(gpus.begin(), gpus.end(), "mps") != gpus.end()) return {"mps"};
  if (!gpus.empty()) return {gpus[0], "cpu"};
  return {"cpu"};
}

// The state of one placement (Accelerate's locals in infer_auto_device_map).
struct Placement {
  const std::map<std::string, int64_t>& sizes;
  const std::vector<std::vector<std::string>>& tied;
  const DeviceMapOptions& options;
  std::vector<Entry> entries;
  int64_t max_size = 0;
  std::vector<std::string> max_names;
  std::map<std::string, int64_t> used;
  DeviceMap map;

  void recompute_max_layer() {
    std::tie(max_size, max_names) = max_layer(module_entries(entries), sizes, options.no_split);
  }
  void push_front(const std::vector<Entry>& front) {
    entries.insert(entries.begin(), front.begin(), front.end());
  }
  std::optional<Entry> fallback(int64_t limit);
};

// Accelerate's fallback_allocate: breadth-first, the first entry that fits `limit` with its ties;
// its ancestors still waiting are split so that it can be taken out on its own.
std::optional<Entry> Placement::fallback(int64_t limit) {
  if (limit < 0) return std::nullopt;  // Accelerate's convert_file_size_to_int refuses it
  std::vector<Entry> search = entries;
  std::optional<Entry> found;
  while (!search.empty() && !found) {
    const Entry e = search.front();
    search.erase(search.begin());
    const auto ties = tied_outside(e.name, tied);
    if (size_with_ties(ties, size_of(sizes, e.name), sizes, search).size <= limit) {
      found = e;
      break;
    }
    if (unsplittable(e, options.no_split)) continue;
    const auto children = split_of(e.name, *e.module);
    search.insert(search.begin(), children.begin(), children.end());
  }
  if (!found) return std::nullopt;
  for (size_t dot = found->name.find('.'); dot != std::string::npos;
       dot = found->name.find('.', dot + 1)) {
    const std::string parent = found->name.substr(0, dot);
    const auto it = std::find_if(entries.begin(), entries.end(),
                                 [&](const Entry& x) { return x.name == parent; });
    if (it == entries.end()) continue;
    const auto children = split_of(parent, *it->module);
    const auto at = entries.erase(it);
    entries.insert(at, children.begin(), children.end());
  }
  const auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const Entry& x) { return x.name == found->name; });
  if (it != entries.end()) entries.erase(it);
  return found;
}

}  // namespace

namespace {

// (B) of Accelerate's loop: the module fits without its ties; split the first tied module that
// can be split, the current module first again. False when none can be.
bool split_a_tied_module(Placement& p, const Entry& e, const WithTies& w) {
  for (const Entry& t : w.modules) {
    if (unsplittable(t, p.options.no_split)) continue;
    const auto children = split_of(t.name, *t.module);
    const auto at = std::find_if(p.entries.begin(), p.entries.end(),
                                 [&](const Entry& x) { return x.name == t.name; });
    const auto index = at - p.entries.begin();
    std::vector<Entry> next{e};
    next.insert(next.end(), p.entries.begin(), p.entries.begin() + index);
    next.insert(next.end(), children.begin(), children.end());
    next.insert(next.end(), p.entries.begin() + index + 1, p.entries.end());
    p.entries = std::move(next);
    p.recompute_max_layer();
    return true;
  }
  return false;
}

// One turn of Accelerate's loop for the entry `e` just taken from the front, on `device`. True
// when it is settled (placed, split or swapped for a fallback); false: try the next device.
bool place_one(Placement& p, const Entry& e, const std::string& device,
               const std::vector<std::string>& main_devices) {
  const bool disk = device == "disk";
  const bool main =
      std::find(main_devices.begin(), main_devices.end(), device) != main_devices.end();
  const int64_t reserved = main ? p.max_size : 0;
  const int64_t limit = disk ? 0 : p.options.max_memory.at(device) - reserved;
  const int64_t module_size = size_of(p.sizes, e.name);
  const auto ties = tied_outside(e.name, p.tied);
  const WithTies w = size_with_ties(ties, module_size, p.sizes, p.entries);
  int64_t& used = p.used[device];
  if (disk || used + w.size <= limit) {  // (A) it fits, with its ties
    used += w.size;
    p.map.emplace_back(e.name, device);
    for (const Entry& t : w.modules) {
      const auto it = std::find_if(p.entries.begin(), p.entries.end(),
                                   [&](const Entry& x) { return x.name == t.name; });
      if (it != p.entries.end()) p.entries.erase(it);
      p.map.emplace_back(t.name, device);
    }
    return true;
  }
  if (!ties.empty() && used + module_size <= limit && split_a_tied_module(p, e, w)) return true;
  if (used + module_size >= limit && !unsplittable(e, p.options.no_split)) {  // (C) split it
    p.push_front(split_of(e.name, *e.module));
    p.recompute_max_layer();
    return true;
  }
  if (used == 0 && p.options.fallback_allocation) {  // (D) something smaller first
    const int64_t fallback_limit =
        p.options.max_memory.at(device) - std::max(p.max_size, w.size) - used;
    if (auto found = p.fallback(fallback_limit)) {
      p.push_front({*found, e});
      return true;
    }
  }
  used += reserved;  // (E) the next device
  return false;
}

}  // namespace

DeviceMap infer_auto_device_map(const ModuleTree& root, const DeviceMapOptions& options) {
  const std::vector<std::string> devices = device_order(options.max_memory);
  const std::vector<std::string> main_devices = main_devices_of(devices);
  const auto sizes = compute_module_sizes(root);
  const auto tied = find_tied_parameters(root);
  Placement p{sizes, tied, options, {}, 0, {}, {}, {}};
  for (const TensorEntry& t : root.params) p.entries.push_back({t.name, nullptr});
  for (const auto& [name, child] : root.children) p.entries.push_back({name, &child});
  for (const TensorEntry& t : root.buffers) p.entries.push_back({t.name, nullptr});
  std::tie(p.max_size, p.max_names) = max_layer(p.entries, sizes, options.no_split);
  size_t current = 0;
  while (!p.entries.empty()) {
    const Entry e = p.entries.front();
    p.entries.erase(p.entries.begin());
    auto& names = p.max_names;
    names.erase(std::remove_if(names.begin(), names.end(),
                               [&](const std::string& n) {
                                 return n == e.name || n.rfind(e.name + ".", 0) == 0;
                               }),
                names.end());
    if (names.empty()) p.recompute_max_layer();
    if (place_one(p, e, devices[current], main_devices)) continue;
    ++current;
    p.push_front({e});
  }
  if (options.clean_result) clean_device_map(p.map);
  return p.map;
}

}  // namespace accel::bigmodel
