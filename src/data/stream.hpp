// Datasets with no known length, read in order: a host callback that writes one sample at a time,
// or the lines of a text file read lazily. The dataloader shards them (stream_shard.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/collate.hpp"
#include "data/dataset.hpp"

namespace accel::data {

// What a stream callback writes one sample through (accel_sample in the C ABI).
class SampleWriter {
 public:
  SampleWriter(const std::vector<FieldSpec>& specs, Sample& sample, int64_t position);
  // Field `field`'s bytes: exactly one row for a fixed field; any whole number of rows for a ragged
  // one. Copies. Throws accel::Error (invalid_argument, shape) naming the field.
  void set_field(size_t field, const void* data, size_t size);
  // Throws a failure of set_field the callback did not make good by writing that field again
  // (it may have ignored it), else
  // accel::Error(callback) naming a field that was never written.
  void check_complete() const;
  // ": after accel_sample_set_field failed: ..." when a write failed, else "".
  std::string failure_note() const;

 private:
  void write(size_t field, const void* data, size_t size);
  const std::vector<FieldSpec>& specs_;
  Sample& sample_;
  int64_t position_;
  std::vector<bool> written_;
  std::map<size_t, Error> failures_;  // by field: writes that failed and were not made good
};

// Reads one epoch of a stream in order, from its start.
class StreamReader {
 public:
  virtual ~StreamReader() = default;
  // The next sample, or false at the end of the stream. Throws accel::Error on failure.
  virtual bool next(Sample& out) = 0;
};

class StreamDataset : public Dataset {
 public:
  explicit StreamDataset(std::vector<FieldSpec> specs);
  int64_t size() const override { return -1; }
  size_t num_fields() const override { return specs_.size(); }
  std::vector<bool> ragged_fields() const override;
  bool is_stream() const override { return true; }
  std::vector<at::Tensor> get_batch(const std::vector<int64_t>& indices,
                                    const std::vector<FieldPadding>& padding,
                                    const std::atomic<bool>* stop) const override;
  const std::vector<FieldSpec>& specs() const { return specs_; }
  // A reader over epoch `epoch` from its first sample.
  virtual std::unique_ptr<StreamReader> open(int64_t epoch) const = 0;

 private:
  std::vector<FieldSpec> specs_;
};

// Writes sample `position` of epoch `epoch` through the writer: 0 written, 1 end of the stream,
// anything else a failure.
using StreamFn = std::function<int32_t(int64_t epoch, int64_t position, SampleWriter& writer)>;

// `release` (may be null) runs with `user_data` when the last reference to the dataset goes.
std::shared_ptr<Dataset> callback_stream(std::vector<FieldSpec> fields, StreamFn fn,
                                         ReleaseFn release, void* user_data);

// One sample per line of the file at `path` (the newline, and a carriage return before it, not
// included): a single ragged uint8 field. Read lazily, from the start again each epoch. Throws
// accel::Error(io) when the file cannot be opened (here, and when an epoch starts).
std::shared_ptr<Dataset> text_lines_stream(const std::string& path);

}  // namespace accel::data
