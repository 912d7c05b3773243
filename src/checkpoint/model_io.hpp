// Model weights as safetensors: one file or greedy shards with the standard index JSON, readable by
// the Hugging Face safetensors readers; and loading them back with name, shape and dtype checks.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_files.hpp"
#include "model/model.hpp"
#include "runtime/accelerator.hpp"

namespace accel::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes `tensors` (any device; stored as contiguous little-endian CPU data) to `path` through a
// temporary file renamed into place. Throws accel::Error(io) naming the file.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata);

// Reads every tensor of a safetensors file, checked as parse_header() checks.
NamedTensors read_safetensors(const std::string& path);
// The __metadata__ of a safetensors file (its header alone is read). Throws as read_safetensors.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

// Accelerate's save_model: `dir`/model.safetensors, or above `max_shard_bytes` the shards
// model-0000i-of-0000N.safetensors filled greedily in parameter order plus
// model.safetensors.index.json. Returns the files written.
std::vector<std::string> save_model(const model::Model& m, const std::string& dir,
                                    uint64_t max_shard_bytes);

// The collective form (accel_save_model): the main process saves as above, with the shard size as
// text ("10GB", "500MB", "1GiB"); every rank returns with its outcome (error class included).
// With save_on_each_node on several machines, each machine's local main process saves, every rank
// returning with the outcome of all.
void save_model_from_main(runtime::Accelerator& acc, const model::Model& m, const std::string& dir,
                          const std::string& max_shard_size);

// Loads a file, an index JSON or a directory holding either into `m`, each tensor read straight
// into place (write_planned). Every name, shape and dtype must match; otherwise
// accel::Error(shape) lists the missing, unexpected and mismatched tensors and nothing is changed.
void load_checkpoint_in_model(model::Model& m, const std::string& path);

class TensorReader;
// A load decided before any tensor's bytes are read: the checkpoint's files open and their headers
// checked (TensorReader), and which checkpoint tensor goes into which of the model's tensors.
struct PlannedLoad {
  std::shared_ptr<TensorReader> reader;
  std::vector<std::pair<std::string, std::string>> copies;  // (model tensor, checkpoint tensor)
};
// load_checkpoint_in_model's plan: every name, shape and dtype must match (accel::Error(shape)
// listing what does not; io for the files).
PlannedLoad plan_strict_load(const model::Model& m, const std::string& path);
// Reads each planned tensor straight into the model's tensor, converting where the dtypes differ,
// one tensor in memory at a time; tensors this rank does not hold (ZeRO stage 3 released them:
// held_here) are neither read nor written. An empty (meta) tensor is allocated, read into and
// filled in place (model::Model::fill); after the last read, the model's empty tensors the plan
// did not fill get their layer's initialisation (model::Model::initialize_empty). A read failing
// midway is accel::Error(io) saying how many tensors were already loaded and that the model is
// partly loaded (an empty tensor not yet read stays empty).
void write_planned(model::Model& m, PlannedLoad& planned);
// Whether this rank holds `t`'s values (ZeRO stage 3 releases the storage of what it does not own).
bool held_here(const at::Tensor& t);

// safetensors' name of a dtype (F32, BF16, I64, ...); accel::Error(dtype) for one it lacks.
std::string safetensors_dtype(at::ScalarType t);
// The LibTorch dtype of a safetensors dtype name; accel::Error(io) naming `file` for one it lacks.
at::ScalarType torch_dtype(const std::string& dtype, const std::string& file);
// A model's tensors as a checkpoint holds them: parameters, then buffers.
NamedTensors model_state(const model::Model& m);

// The two halves of load_checkpoint_in_model, for load_state, which checks every file before it
// changes anything: each live tensor of `m` paired with the checked value read for it; applying
// copies them in and cannot fail.
using StagedWeights = std::vector<std::pair<at::Tensor, at::Tensor>>;
StagedWeights stage_checkpoint_for_model(const model::Model& m, const std::string& path);
void apply_weights(const StagedWeights& staged);

}  // namespace accel::checkpoint
