#include "data/dataset.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/error.hpp"
#include "data/collate.hpp"
#include "data/decoded_cache.hpp"
#include "data/idx_file.hpp"
#include "logging/logger.hpp"

namespace accel::data {

namespace {

at::Tensor index_tensor(const std::vector<int64_t>& indices) {
  return at::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                       at::kLong);
}

class TensorDataset final : public Dataset {
 public:
  explicit TensorDataset(std::vector<at::Tensor> fields) : fields_(std::move(fields)) {}
  int64_t size() const override { return fields_.front().size(0); }
  size_t num_fields() const override { return fields_.size(); }
  std::vector<at::Tensor> get_batch(const std::vector<int64_t>& indices,
                                    const std::vector<FieldPadding>&,
                                    const std::atomic<bool>*) const override {
    const at::Tensor idx = index_tensor(indices);
    std::vector<at::Tensor> out;
    for (const auto& f : fields_) out.push_back(f.index_select(0, idx));
    return out;
  }

 private:
  std::vector<at::Tensor> fields_;
};

thread_local int t_callback_depth = 0;

// Marks the calling thread as inside a sample callback for the callback's duration.
struct InCallback {
  InCallback() { ++t_callback_depth; }
  ~InCallback() { --t_callback_depth; }
};

void check_stop(const std::atomic<bool>* stop) {
  if (stop && stop->load(std::memory_order_acquire)) throw Cancelled{};
}

class CallbackDataset final : public Dataset {
 public:
  CallbackDataset(int64_t length, std::vector<FieldSpec> fields, LengthFn lengths, SampleFn fn,
                  void* user_data, ReleaseFn release)
      : length_(length),
        fields_(std::move(fields)),
        lengths_fn_(lengths),
        fn_(fn),
        user_data_(user_data),
        release_(release) {
    for (const auto& f : fields_) ragged_.push_back(f.ragged);
  }
  ~CallbackDataset() override {
    if (release_) release_(user_data_);
  }
  int64_t size() const override { return length_; }
  size_t num_fields() const override { return fields_.size(); }
  std::vector<bool> ragged_fields() const override { return ragged_; }

  int64_t sample_length(int64_t index) const override {
    const auto first = std::find(ragged_.begin(), ragged_.end(), true) - ragged_.begin();
    if (first == static_cast<long>(ragged_.size())) return Dataset::sample_length(index);
    return checked(lengths_of(index), index, {})[static_cast<size_t>(first)];
  }

  std::vector<at::Tensor> get_batch(const std::vector<int64_t>& indices,
                                    const std::vector<FieldPadding>& padding,
                                    const std::atomic<bool>* stop) const override {
    const auto batch = static_cast<int64_t>(indices.size());
    const size_t nf = fields_.size();
    // Every sample's lengths first: the batch's padded length must be known before any fill.
    std::vector<std::vector<int64_t>> lengths(indices.size()), kept(nf);
    if (lengths_fn_) {
      for (size_t s = 0; s < indices.size(); ++s) {
        check_stop(stop);
        lengths[s] = checked(lengths_of(indices[s]), indices[s], &padding);
        for (size_t f = 0; f < nf; ++f)
          if (ragged_[f]) kept[f].push_back(kept_length(padding[f], lengths[s][f], indices[s], f));
      }
    }
    std::vector<at::Tensor> out;
    std::vector<int64_t> padded(nf, 0);
    for (size_t f = 0; f < nf; ++f) {
      const auto& spec = fields_[f];
      std::vector<int64_t> shape{batch};
      shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
      const auto options = at::TensorOptions().dtype(spec.dtype);
      if (!spec.ragged) {
        out.push_back(at::empty(shape, options));
        continue;
      }
      padded[f] = padded_length(padding[f], kept[f]);
      shape[1] = padded[f];
      out.push_back(at::full(shape, padding[f].pad_value, options));
    }
    fill(indices, padding, lengths, kept, padded, out, stop);
    append_masks(fields_, padding, kept, padded, out);
    return out;
  }

 private:
  std::vector<int64_t> lengths_of(int64_t index) const {
    std::vector<int64_t> l(fields_.size(), 0);
    int32_t rc;
    {
      InCallback marked;
      rc = lengths_fn_(index, l.data(), l.size(), user_data_);
    }
    if (rc != 0)
      fail(Errc::callback, "the dataset's length callback returned " + std::to_string(rc) +
                               " for index " + std::to_string(index));
    return l;
  }

  // The lengths as reported, each checked (padding may be null: then only the sign and size).
  std::vector<int64_t> checked(std::vector<int64_t> l, int64_t index,
                               const std::vector<FieldPadding>* padding) const {
    for (size_t f = 0; f < l.size(); ++f)
      if (ragged_[f]) kept_length(padding ? (*padding)[f] : FieldPadding{}, l[f], index, f);
    return l;
  }

  // Each sample written straight into its row of the batch tensors (a ragged one at its padded
  // offset); only a truncated sample goes through a scratch buffer, cut when copied.
  void fill(const std::vector<int64_t>& indices, const std::vector<FieldPadding>& padding,
            const std::vector<std::vector<int64_t>>& lengths,
            const std::vector<std::vector<int64_t>>& kept, const std::vector<int64_t>& padded,
            std::vector<at::Tensor>& out, const std::atomic<bool>* stop) const {
    const size_t nf = fields_.size();
    std::vector<size_t> rows(nf), sizes(nf);
    for (size_t f = 0; f < nf; ++f) rows[f] = row_bytes(fields_[f]);
    std::vector<void*> buffers(nf);
    std::vector<std::vector<char>> scratch(nf);
    for (size_t s = 0; s < indices.size(); ++s) {
      check_stop(stop);
      for (size_t f = 0; f < nf; ++f) {
        auto* base = static_cast<char*>(out[f].data_ptr());
        if (!ragged_[f]) {
          sizes[f] = rows[f];
          buffers[f] = base + rows[f] * s;
          continue;
        }
        const int64_t length = lengths[s][f], keep = kept[f][s];
        sizes[f] = rows[f] * static_cast<size_t>(length);
        char* row = base + rows[f] * static_cast<size_t>(padded[f] * static_cast<int64_t>(s) +
                                                         first_row(padding[f], keep, padded[f]));
        if (keep == length) {
          buffers[f] = row;
        } else {
          scratch[f].resize(sizes[f]);
          buffers[f] = scratch[f].data();
        }
      }
      call_fill(indices[s], buffers, sizes);
      for (size_t f = 0; f < nf; ++f)
        if (ragged_[f] && buffers[f] == scratch[f].data() && kept[f][s] != lengths[s][f])
          copy_kept(padding[f], f, s, kept[f][s], padded[f], out[f], scratch[f]);
    }
  }

  void call_fill(int64_t index, std::vector<void*>& buffers,
                 const std::vector<size_t>& sizes) const {
    int32_t rc;
    {
      InCallback marked;
      rc = fn_(index, buffers.data(), sizes.data(), fields_.size(), user_data_);
    }
    if (rc != 0)
      fail(Errc::callback, "the dataset's sample callback returned " + std::to_string(rc) +
                               " for index " + std::to_string(index));
  }

  // Truncation keeps a sample's first rows (Hugging Face's default truncation side).
  void copy_kept(const FieldPadding& padding, size_t f, size_t s, int64_t keep, int64_t padded,
                 at::Tensor& field, const std::vector<char>& scratch) const {
    const size_t row = row_bytes(fields_[f]);
    char* dst = static_cast<char*>(field.data_ptr()) +
                row * static_cast<size_t>(padded * static_cast<int64_t>(s) +
                                          first_row(padding, keep, padded));
    std::memcpy(dst, scratch.data(), row * static_cast<size_t>(keep));
  }

  int64_t length_;
  std::vector<FieldSpec> fields_;
  std::vector<bool> ragged_;
  LengthFn lengths_fn_;
  SampleFn fn_;
  void* user_data_;
  ReleaseFn release_;
};

}  // namespace

std::shared_ptr<Dataset> tensor_dataset(std::vector<at::Tensor> fields) {
  if (fields.empty()) fail(Errc::invalid_argument, "a dataset needs at least one tensor");
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].dim() == 0)
      fail(Errc::shape, "tensor " + std::to_string(i) +
                            " is a scalar; samples run along dimension 0, so it needs one");
    if (fields[i].size(0) != fields[0].size(0))
      fail(Errc::shape, "tensor " + std::to_string(i) + " has " +
                            std::to_string(fields[i].size(0)) + " samples but tensor 0 has " +
                            std::to_string(fields[0].size(0)) +
                            "; every tensor's first dimension must agree");
  }
  return std::make_shared<TensorDataset>(std::move(fields));
}

bool in_sample_callback() {
  return t_callback_depth > 0;
}

void mark_sample_callback(bool entering) {
  t_callback_depth += entering ? 1 : -1;
}

std::shared_ptr<Dataset> callback_dataset(int64_t length, std::vector<FieldSpec> fields,
                                          LengthFn lengths, SampleFn fn, void* user_data,
                                          ReleaseFn release) {
  if (length < 0) fail(Errc::invalid_argument, "dataset length is negative");
  if (fields.empty()) fail(Errc::invalid_argument, "a dataset needs at least one field");
  if (!fn) fail(Errc::invalid_argument, "the sample callback is NULL");
  bool any_ragged = false;
  for (size_t f = 0; f < fields.size(); ++f) {
    const auto& spec = fields[f];
    if (spec.ragged && spec.shape.empty())
      fail(Errc::shape, "field " + std::to_string(f) +
                            " is ragged but has no dimensions: its first dimension is the one "
                            "that varies");
    for (size_t d = spec.ragged ? 1 : 0; d < spec.shape.size(); ++d)
      if (spec.shape[d] < 0)
        fail(Errc::shape, "field " + std::to_string(f) +
                              "'s sample shape has a negative dimension" +
                              (d == 0 ? " (ACCEL_RAGGED, -1, is allowed first only in "
                                        "accel_dataset_from_ragged_callback)"
                                      : ""));
    any_ragged = any_ragged || spec.ragged;
  }
  if (any_ragged && !lengths)
    fail(Errc::invalid_argument, "a dataset with a ragged field needs a length callback");
  return std::make_shared<CallbackDataset>(length, std::move(fields),
                                           any_ragged ? lengths : nullptr, fn, user_data, release);
}

int64_t Dataset::sample_length(int64_t) const {
  fail(Errc::invalid_argument,
       "the dataset has no ragged field, so its samples have no length to group by");
}

namespace {

std::optional<at::ScalarType> idx_scalar_type(uint8_t code) {
  switch (code) {
    case 0x08:
      return at::kByte;
    case 0x09:
      return at::kChar;
    case 0x0B:
      return at::kShort;
    case 0x0C:
      return at::kInt;
    case 0x0D:
      return at::kFloat;
    case 0x0E:
      return at::kDouble;
  }
  return std::nullopt;
}

// `path`'s data, decoded into this process's memory.
at::Tensor decode_to_tensor(const std::string& path, const IdxLayout& layout) {
  at::Tensor t =
      at::empty(layout.shape, at::TensorOptions().dtype(*idx_scalar_type(layout.type_code)));
  auto* out = static_cast<unsigned char*>(t.data_ptr());
  decode_idx(path, layout, [&out](const unsigned char* data, size_t size) {
    std::memcpy(out, data, size);
    out += size;
  });
  return t;
}

// A field of an IDX dataset: in this process's memory, or rows read from the machine's decoded
// copy (decoded_cache.hpp), which no rank then holds in its resident set.
struct IdxField {
  at::Tensor tensor;  // defined when in memory
  DecodedCopy copy;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kByte;
  size_t row_bytes = 0;
};

class IdxDataset final : public Dataset {
 public:
  explicit IdxDataset(std::vector<IdxField> fields) : fields_(std::move(fields)) {}
  int64_t size() const override { return fields_.front().shape[0]; }
  size_t num_fields() const override { return fields_.size(); }
  std::vector<at::Tensor> get_batch(const std::vector<int64_t>& indices,
                                    const std::vector<FieldPadding>&,
                                    const std::atomic<bool>*) const override {
    std::vector<at::Tensor> out;
    for (const auto& f : fields_) {
      if (f.tensor.defined()) {
        out.push_back(f.tensor.index_select(0, index_tensor(indices)));
        continue;
      }
      std::vector<int64_t> shape = f.shape;
      shape[0] = static_cast<int64_t>(indices.size());
      at::Tensor batch = at::empty(shape, at::TensorOptions().dtype(f.dtype));
      auto* row = static_cast<unsigned char*>(batch.data_ptr());
      for (const int64_t i : indices) {
        if (i < 0 || i >= size()) fail(Errc::internal, "sample index out of range");
        read_copy(f.copy, static_cast<size_t>(i) * f.row_bytes, f.row_bytes, row);
        row += f.row_bytes;
      }
      out.push_back(std::move(batch));
    }
    return out;
  }

 private:
  std::vector<IdxField> fields_;
};

// Below this a decoded field is simply kept in memory (labels): one read, no per-row calls.
constexpr size_t kRowsFromCopyAbove = size_t{1} << 20;

// A compressed file (or one whose values need turning to this machine's order) is decoded once per
// machine into the cache; without a usable cache, into this process's memory.
IdxField load_idx(const std::string& path, const IdxLayout& layout, const std::string& cache) {
  IdxField f;
  f.shape = layout.shape;
  f.dtype = *idx_scalar_type(layout.type_code);
  f.row_bytes = layout.shape[0] > 0 ? layout.data_bytes / static_cast<size_t>(layout.shape[0]) : 0;
  if ((layout.compressed || layout.width > 1) && layout.data_bytes > 0) {
    std::string why;
    auto copy = open_decoded(
        cache, path, layout.data_bytes,
        [&](const ByteSink& sink) { decode_idx(path, layout, sink); }, &why);
    if (copy && layout.data_bytes > kRowsFromCopyAbove) {
      f.copy = *copy;
      return f;
    }
    if (copy) {
      f.tensor = at::empty(layout.shape, at::TensorOptions().dtype(f.dtype));
      read_copy(*copy, 0, layout.data_bytes, f.tensor.data_ptr());
      return f;
    }
    // Said once per process: every rank then holds a decoded copy of its own, which its memory
    // figures show, and the user should know why (a cache switched off says nothing).
    static std::once_flag said;
    if (!cache.empty())
      std::call_once(said, [&] {
        logging::process_logger().say(logging::kWarning,
                                      path +
                                          " is decoded into this process's memory: the dataset "
                                          "cache cannot serve it (" +
                                          why + ")");
      });
  }
  f.tensor = decode_to_tensor(path, layout);
  return f;
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  return decode_to_tensor(path, read_idx_layout(path));
}

std::shared_ptr<Dataset> idx_dataset(const std::vector<std::string>& paths) {
  if (paths.empty()) fail(Errc::invalid_argument, "no IDX files given");
  // Every header first: files that disagree fail before anything is decoded.
  std::vector<IdxLayout> layouts;
  for (const auto& p : paths) layouts.push_back(read_idx_layout(p));
  for (size_t i = 1; i < layouts.size(); ++i)
    if (layouts[i].shape[0] != layouts[0].shape[0])
      fail(Errc::shape, "IDX files disagree on the number of samples: '" + paths[0] + "' has " +
                            std::to_string(layouts[0].shape[0]) + ", '" + paths[i] + "' has " +
                            std::to_string(layouts[i].shape[0]));
  const std::string cache = decoded_cache_dir([](const char* name) { return std::getenv(name); });
  std::vector<IdxField> fields;
  for (size_t i = 0; i < paths.size(); ++i) fields.push_back(load_idx(paths[i], layouts[i], cache));
  return std::make_shared<IdxDataset>(std::move(fields));
}

}  // namespace accel::data
