// Which checkpoint tensor goes into which model tensor when a pretrained checkpoint is loaded as
// Hugging Face transformers loads it (PreTrainedModel._load_pretrained_model, 4.4x): names matched
// after transformers' base_model_prefix rule, what is missing, unexpected or of another shape, the
// dtype conversions, and transformers' report of it. Pure logic: the loader reads the tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::checkpoint {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // safetensors' names: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL
};

struct LoadOptions {
  // transformers' base_model_prefix ("bert"): a checkpoint of the base model loads into a model
  // that holds it under the prefix, and the other way round. Empty: names as they are.
  std::string base_model_prefix;
  bool strict = true;                    // anything missing, unexpected or mismatched fails
  bool ignore_mismatched_sizes = false;  // not strict: a shape mismatch keeps the model's tensor
  // Tensors of the model that share one storage (tied weights): one loaded loads them all.
  std::vector<std::vector<std::string>> tied;
  // Checkpoint tensors the program's name map left unused (map_checkpoint_names): unexpected.
  std::vector<std::string> unused;
};

// The program's name map: the model's name for a checkpoint tensor's name, or nullopt to leave
// that tensor unused. Called once per name, in the checkpoint's order.
using NameMap = std::function<std::optional<std::string>(const std::string&)>;

struct MappedNames {
  std::vector<TensorSpec> checkpoint;           // the tensors the map named, under their new names
  std::map<std::string, std::string> original;  // new name -> the checkpoint's name
  std::vector<std::string> unused;              // the checkpoint's names the map left unused
};

// Renames the checkpoint's tensors by `map`, as transformers' key_mapping renames them before its
// base_model_prefix rule: the new names take the checkpoint names' place in plan_load. Throws
// accel::Error(invalid_argument) naming both checkpoint tensors when two get one name; what
// `map` throws passes through.
MappedNames map_checkpoint_names(const std::vector<TensorSpec>& checkpoint, const NameMap& map);

struct Mismatch {
  std::string key;  // in the checkpoint's names
  std::vector<int64_t> checkpoint_shape, model_shape;
};

struct LoadPlan {
  // (model tensor, checkpoint tensor), the checkpoint's cast to the model's dtype when they differ.
  std::vector<std::pair<std::string, std::string>> copies;
  std::vector<std::string> missing;     // sorted, in the checkpoint's names (transformers' keys)
  std::vector<std::string> unexpected;  // sorted
  std::vector<Mismatch> mismatched;
};

// The plan, or accel::Error: shape (strict, or a mismatch without ignore_mismatched_sizes) or
// invalid_argument (strict: missing or unexpected tensors; a floating tensor for an integer one or
// the other way) naming every tensor concerned.
LoadPlan plan_load(const std::vector<TensorSpec>& model, const std::vector<TensorSpec>& checkpoint,
                   const LoadOptions& options);

struct ReportLine {
  bool warning;  // transformers' logger.warning; false: logger.info
  std::string text;
};
// transformers' messages for a load of `path` into `model_name`, in its order and at its levels
// (unexpected tensors are a warning when `architecture_matches`, as transformers' check of
// config.architectures; otherwise info).
std::vector<ReportLine> load_report(const LoadPlan& plan, const std::string& model_name,
                                    const std::string& path, bool architecture_matches);

}  // namespace accel::checkpoint
