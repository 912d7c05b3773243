#include "data/dataset.hpp"

#include <ATen/ATen.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/error.hpp"

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

class CallbackDataset final : public Dataset {
 public:
  CallbackDataset(int64_t length, std::vector<FieldSpec> fields, SampleFn fn, void* user_data,
                  ReleaseFn release)
      : length_(length),
        fields_(std::move(fields)),
        fn_(fn),
        user_data_(user_data),
        release_(release) {}
  ~CallbackDataset() override {
    if (release_) release_(user_data_);
  }
  int64_t size() const override { return length_; }
  size_t num_fields() const override { return fields_.size(); }
  std::vector<at::Tensor> get_batch(const std::vector<int64_t>& indices,
                                    const std::atomic<bool>* stop) const override {
    const auto batch = static_cast<int64_t>(indices.size());
    std::vector<at::Tensor> out;
    std::vector<size_t> sizes;
    for (const auto& f : fields_) {
      std::vector<int64_t> shape{batch};
      shape.insert(shape.end(), f.shape.begin(), f.shape.end());
      out.push_back(at::empty(shape, at::TensorOptions().dtype(f.dtype)));
      sizes.push_back(batch ? out.back().nbytes() / static_cast<size_t>(batch) : 0);
    }
    // Each sample is written straight into its row of the batch tensors: no copy after the fill.
    std::vector<void*> buffers(fields_.size());
    for (int64_t s = 0; s < batch; ++s) {
      if (stop && stop->load(std::memory_order_acquire)) throw Cancelled{};
      for (size_t f = 0; f < fields_.size(); ++f)
        buffers[f] = static_cast<char*>(out[f].data_ptr()) + sizes[f] * static_cast<size_t>(s);
      int32_t rc;
      {
        InCallback marked;
        rc = fn_(indices[static_cast<size_t>(s)], buffers.data(), sizes.data(), fields_.size(),
                 user_data_);
      }
      if (rc != 0)
        fail(Errc::callback, "the dataset's sample callback returned " + std::to_string(rc) +
                                 " for index " + std::to_string(indices[static_cast<size_t>(s)]));
    }
    return out;
  }

 private:
  int64_t length_;
  std::vector<FieldSpec> fields_;
  SampleFn fn_;
  void* user_data_;
  ReleaseFn release_;
};

// Reads exactly `n` bytes or reports how many there were.
size_t read_fully(gzFile f, void* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, static_cast<char*>(out) + done, chunk);
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

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

std::shared_ptr<Dataset> callback_dataset(int64_t length, std::vector<FieldSpec> fields,
                                          SampleFn fn, void* user_data, ReleaseFn release) {
  if (length < 0) fail(Errc::invalid_argument, "dataset length is negative");
  if (fields.empty()) fail(Errc::invalid_argument, "a dataset needs at least one field");
  if (!fn) fail(Errc::invalid_argument, "the sample callback is NULL");
  for (const auto& f : fields)
    for (int64_t d : f.shape)
      if (d < 0) fail(Errc::shape, "a field's sample shape has a negative dimension");
  return std::make_shared<CallbackDataset>(length, std::move(fields), fn, user_data, release);
}

at::Tensor read_idx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are, too
  if (!f) fail(Errc::io, "cannot open IDX file '" + path + "'");
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  gzbuffer(f, 1 << 17);
  unsigned char magic[4];
  if (read_fully(f, magic, 4) != 4)
    fail(Errc::io, "IDX file '" + path + "' is too short to hold a header");
  // IDX type codes; the element width follows from the type.
  std::optional<at::ScalarType> type;
  switch (magic[2]) {
    case 0x08:
      type = at::kByte;
      break;
    case 0x09:
      type = at::kChar;
      break;
    case 0x0B:
      type = at::kShort;
      break;
    case 0x0C:
      type = at::kInt;
      break;
    case 0x0D:
      type = at::kFloat;
      break;
    case 0x0E:
      type = at::kDouble;
      break;
  }
  const size_t width = type ? c10::elementSize(*type) : 0;
  if (magic[0] != 0 || magic[1] != 0 || width == 0 || magic[3] == 0)
    fail(Errc::io, "'" + path + "' is not an IDX file: its magic number is " +
                       std::to_string(magic[0]) + " " + std::to_string(magic[1]) + " " +
                       std::to_string(magic[2]) + " " + std::to_string(magic[3]) +
                       " (expected 0 0 <type 8,9,11,12,13,14> <dimensions>)");
  std::vector<int64_t> shape(magic[3]);
  size_t count = 1;
  for (auto& d : shape) {
    unsigned char b[4];
    if (read_fully(f, b, 4) != 4)
      fail(Errc::io, "IDX file '" + path + "' is truncated in its header");
    d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    if (d > 0 && count > (size_t{1} << 40) / static_cast<size_t>(d))
      fail(Errc::io, "IDX file '" + path + "' declares an implausibly large shape");
    count *= static_cast<size_t>(d);
  }
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(*type));
  const size_t bytes = count * width;
  const size_t got = read_fully(f, t.data_ptr(), bytes);
  if (got != bytes)
    fail(Errc::io, "IDX file '" + path + "' is truncated: its header promises " +
                       std::to_string(bytes) + " bytes of data, it holds " + std::to_string(got));
  if (width > 1) {  // IDX stores big-endian values
    auto* p = static_cast<unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < count; ++i) std::reverse(p + i * width, p + (i + 1) * width);
  }
  return t;
}

std::shared_ptr<Dataset> idx_dataset(const std::vector<std::string>& paths) {
  if (paths.empty()) fail(Errc::invalid_argument, "no IDX files given");
  std::vector<at::Tensor> fields;
  for (const auto& p : paths) fields.push_back(read_idx(p));
  for (size_t i = 1; i < fields.size(); ++i)
    if (fields[i].size(0) != fields[0].size(0))
      fail(Errc::shape, "IDX files disagree on the number of samples: '" + paths[0] + "' has " +
                            std::to_string(fields[0].size(0)) + ", '" + paths[i] + "' has " +
                            std::to_string(fields[i].size(0)));
  return tensor_dataset(std::move(fields));
}

}  // namespace accel::data
