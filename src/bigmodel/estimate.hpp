// `accel estimate-memory`'s figures: Accelerate's estimate (commands/estimate.py, 1.15) of a
// model's size from a checkpoint's tensor list, and libaccel's per-rank model-state memory under
// each ZeRO stage. Pure C++ (no LibTorch).
//
// Accelerate builds the model empty in float32 and measures its tensors as created; from a
// checkpoint we have names, dtypes and shapes, so a floating tensor counts 4 bytes per element
// whatever dtype the file stores (an fp16 checkpoint's model is still created in fp32), and an
// integer or bool tensor (a buffer such as position_ids or num_batches_tracked) its stored size,
// as the created model keeps its dtype. Accelerate's largest layer is its largest leaf module (or
// no-split module); here a tensor's module is its name less the last segment, and a tensor of the
// root (a name without a dot) is a layer of its own, as Accelerate takes the root's own tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"

namespace accel::bigmodel {

struct ModelSizes {
  uint64_t total = 0;                      // Accelerate's total_size (fp32 model), bytes
  uint64_t largest_layer = 0;              // Accelerate's largest_layer[0], bytes
  std::vector<std::string> largest_names;  // the layers of that size, in checkpoint order
  // For the ZeRO figures: the floating tensors (trainable parameters as libaccel trains them, fp32)
  // and the rest (buffers every rank keeps whole).
  std::vector<int64_t> param_bytes;  // each floating tensor's fp32 bytes, in checkpoint order
  uint64_t buffer_bytes = 0;
  std::vector<uint64_t> unit_param_bytes;  // each layer's floating bytes (ZeRO-3's units)
  uint64_t root_param_bytes = 0;           // floating tensors of no module: the root unit's
};

// Sizes from the tensors' names, dtypes and shapes. `no_split`: an ECMAScript regular expression;
// a module whose whole name matches it is one layer with everything under it (Accelerate's
// no_split_module_classes, by name instead of class; the outermost match wins). Empty: none.
// Throws accel::Error(invalid_argument) for an invalid expression.
ModelSizes model_sizes(const std::vector<checkpoint::TensorEntry>& tensors,
                       const std::string& no_split);

// A number as Python prints it: an int (is_integer) as its digits, a float as repr() does.
struct PyNumber {
  double value = 0;
  bool is_integer = false;
};
// Python's repr(round(x, 2)) for a finite float x >= 0.
std::string python_round2(double x);
// Accelerate's convert_bytes: "512 bytes", "1.5 KB", ... (binary units, round(x, 2)).
std::string convert_bytes(PyNumber size);

// Accelerate's create_ascii_table (commands/estimate.py), code point for code point.
std::string ascii_table(const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::string& title);

// The dtypes Accelerate accepts (float32, float16, int8, int4) and bfloat16 (as float16).
bool known_dtype(const std::string& dtype);
// Accelerate's estimate table for `dtypes`, titled "Memory Usage for loading `NAME`".
std::string accelerate_table(const ModelSizes& sizes, const std::vector<std::string>& dtypes,
                             const std::string& name);

// Model-state memory of the rank that holds most, fp32 AdamW, libaccel's ZeRO (owners of whole
// parameters: zero::assign_owners, no flattening, no padding).
struct ZeroFigures {
  int stage = 0;
  uint64_t parameters = 0, gradients = 0, optimizer = 0, transient = 0;
  uint64_t total() const { return parameters + gradients + optimizer + transient; }
};
ZeroFigures zero_per_rank(const ModelSizes& sizes, int stage, int processes);
// The table of `stages` (each 0..3) on `processes` ranks.
std::string zero_table(const ModelSizes& sizes, const std::vector<int>& stages, int processes);

}  // namespace accel::bigmodel
