#include "checkpoint/pretrained.hpp"

#include <ATen/ATen.h>

#include <map>

#include "checkpoint/model_io.hpp"
#include "checkpoint/tensor_reader.hpp"
#include "common/error.hpp"
#include "model/model.hpp"

namespace accel::checkpoint {
namespace {

bool flag(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  fail(Errc::invalid_argument, "load option " + key + ": '" + value + "' is not true or false");
}

std::vector<TensorSpec> specs_of(const NamedTensors& tensors) {
  std::vector<TensorSpec> out;
  for (const auto& [name, t] : tensors)
    out.push_back({name, t.sizes().vec(), safetensors_dtype(t.scalar_type())});
  return out;
}

// The model's tensors that share one storage (tied weights), as groups of names.
std::vector<std::vector<std::string>> tied_groups(const NamedTensors& state) {
  std::map<const void*, std::vector<std::string>> by_storage;
  // Storage released by ZeRO stage 3 (no data) ties nothing: shared storage stays whole there.
  // Nor do empty (meta) tensors: their storages have no memory, so all would look alike.
  for (const auto& [name, t] : state)
    if (t.defined() && !t.is_meta() && t.numel() > 0 && t.storage().nbytes() > 0)
      by_storage[t.storage().data()].push_back(name);
  std::vector<std::vector<std::string>> groups;
  for (auto& [ptr, names] : by_storage)
    if (names.size() > 1) groups.push_back(names);
  return groups;
}

}  // namespace

PretrainedOptions parse_pretrained_options(const std::string& spec) {
  std::map<std::string, std::string> map;
  try {
    map = model::parse_spec(spec);
  } catch (const accel::Error& e) {
    fail(Errc::invalid_argument, std::string("load options: ") + e.what());
  }
  PretrainedOptions o;
  for (const auto& [key, value] : map) {
    if (key == "strict")
      o.load.strict = flag(key, value);
    else if (key == "base_model_prefix")
      o.load.base_model_prefix = value;
    else if (key == "ignore_mismatched_sizes")
      o.load.ignore_mismatched_sizes = flag(key, value);
    else if (key == "model_name")
      o.model_name = value;
    else if (key == "architecture_matches")
      o.architecture_matches = flag(key, value);
    else
      fail(Errc::invalid_argument,
           "unknown load option '" + key +
               "'; known: strict, base_model_prefix, ignore_mismatched_sizes, model_name, "
               "architecture_matches");
  }
  return o;
}

PlannedLoad plan_pretrained(const model::Model& m, const std::string& path,
                            const PretrainedOptions& options, PretrainedLoad* out) {
  PlannedLoad planned;
  planned.reader = std::make_shared<TensorReader>(checkpoint_files(path));
  const NamedTensors state = model_state(m);
  LoadOptions load = options.load;
  load.tied = tied_groups(state);
  if (!options.map) {
    out->plan = plan_load(specs_of(state), planned.reader->specs(), load);
  } else {
    MappedNames mapped = map_checkpoint_names(planned.reader->specs(), options.map);
    load.unused = std::move(mapped.unused);
    out->plan = plan_load(specs_of(state), mapped.checkpoint, load);
    for (auto& copy : out->plan.copies) copy.second = mapped.original.at(copy.second);
  }
  planned.copies = out->plan.copies;  // cast to the model's dtype as they are read
  out->report = load_report(out->plan, options.model_name, path, options.architecture_matches);
  return planned;
}

PretrainedLoad load_pretrained(model::Model& m, const std::string& path,
                               const PretrainedOptions& options) {
  m.require_whole("accel_load_pretrained");
  PretrainedLoad out;
  PlannedLoad planned = plan_pretrained(m, path, options, &out);
  write_planned(m, planned);
  return out;
}

}  // namespace accel::checkpoint
