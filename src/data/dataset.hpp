// Datasets: a length and a way to produce a collated batch for a list of indices. One tensor per
// field (images, labels, ...), samples along dimension 0.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/padding.hpp"

namespace accel::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual size_t num_fields() const = 0;
  // A stream (stream.hpp) has no known length (size() is -1) and is read in order, not by index.
  virtual bool is_stream() const { return false; }
  // Per field: true when its first per-sample dimension varies from sample to sample.
  virtual std::vector<bool> ragged_fields() const { return std::vector<bool>(num_fields()); }
  // The length of sample `index`'s first ragged field (what length grouping sorts by). Only for a
  // dataset with a ragged field.
  virtual int64_t sample_length(int64_t index) const;
  // The samples `indices`, stacked per field along a new dimension 0; a ragged field padded as
  // `padding[f]` says, and after the dataset's fields one mask per ragged field whose padding asks
  // for one (PadMask). May be called from several threads at once. Throws accel::Error on failure.
  // When `stop` becomes true the call gives up between samples (throwing Cancelled), so that
  // whoever stops it waits for one sample at most.
  virtual std::vector<at::Tensor> get_batch(const std::vector<int64_t>& indices,
                                            const std::vector<FieldPadding>& padding,
                                            const std::atomic<bool>* stop = nullptr) const = 0;
};

// Thrown by get_batch when its `stop` flag was raised.
struct Cancelled {};

// True on a thread that is running a dataset's sample callback: the calls such a callback may not
// make (into its dataloader, or into a training family that may be waiting for it) check this.
bool in_sample_callback();
// Marks the calling thread as entering (true) or leaving (false) a host's sample callback.
void mark_sample_callback(bool entering);

// Fields held in memory; every field's first dimension is the number of samples.
std::shared_ptr<Dataset> tensor_dataset(std::vector<at::Tensor> fields);

// Per-sample layout of a field filled by a callback. A ragged field's shape[0] is a placeholder:
// each sample's length replaces it.
struct FieldSpec {
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  bool ragged = false;
};

// Fills the buffers of one sample (one per field, sizes in bytes); returns 0 on success.
using SampleFn = int32_t (*)(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                             void* user_data);
// Writes the length of each ragged field of sample `index` into lengths[f]; returns 0 on success.
using LengthFn = int32_t (*)(int64_t index, int64_t* lengths, size_t count, void* user_data);
// Called once with user_data when the dataset is destroyed (the callback's last use is over).
using ReleaseFn = void (*)(void* user_data);

// `release` (may be null) runs when the last reference to the dataset goes, on that thread.
// `lengths` is required when a field is ragged, and unused otherwise.
std::shared_ptr<Dataset> callback_dataset(int64_t length, std::vector<FieldSpec> fields,
                                          LengthFn lengths, SampleFn fn, void* user_data,
                                          ReleaseFn release);

// IDX files (the MNIST family), plain or gzip-compressed; one field per file, in the file's own
// dtype and shape. Throws accel::Error naming the file for a bad magic number, a truncated file, or
// files that disagree on the number of samples.
std::shared_ptr<Dataset> idx_dataset(const std::vector<std::string>& paths);

// One IDX file as a tensor (exposed for tests).
at::Tensor read_idx(const std::string& path);

}  // namespace accel::data
