#include "data/collate.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace accel::data {

size_t row_bytes(const FieldSpec& f) {
  size_t n = c10::elementSize(f.dtype);
  for (size_t d = f.ragged ? 1 : 0; d < f.shape.size(); ++d) n *= static_cast<size_t>(f.shape[d]);
  return n;
}

std::vector<at::Tensor> collate(const std::vector<const Sample*>& samples,
                                const std::vector<int64_t>& positions,
                                const std::vector<FieldSpec>& specs,
                                const std::vector<FieldPadding>& padding) {
  const auto batch = static_cast<int64_t>(samples.size());
  std::vector<at::Tensor> out;
  std::vector<std::vector<int64_t>> kept(specs.size());
  std::vector<int64_t> padded(specs.size(), 0);
  for (size_t f = 0; f < specs.size(); ++f) {
    const auto& spec = specs[f];
    const size_t row = row_bytes(spec);
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    const auto options = at::TensorOptions().dtype(spec.dtype);
    if (!spec.ragged) {
      at::Tensor t = at::empty(shape, options);
      auto* base = static_cast<unsigned char*>(t.data_ptr());
      for (size_t s = 0; s < samples.size() && row > 0; ++s)
        std::memcpy(base + row * s, samples[s]->fields[f].data(), row);
      out.push_back(t);
      continue;
    }
    for (size_t s = 0; s < samples.size(); ++s)
      kept[f].push_back(kept_length(padding[f], samples[s]->rows[f], positions[s], f));
    padded[f] = padded_length(padding[f], kept[f]);
    shape[1] = padded[f];
    at::Tensor t = at::full(shape, padding[f].pad_value, options);
    auto* base = static_cast<unsigned char*>(t.data_ptr());
    for (size_t s = 0; s < samples.size(); ++s) {
      const int64_t keep = kept[f][s];
      if (keep == 0) continue;  // an empty sample's bytes may be a null pointer: nothing to copy
      const int64_t first = first_row(padding[f], keep, padded[f]);
      std::memcpy(base + row * static_cast<size_t>(padded[f] * static_cast<int64_t>(s) + first),
                  samples[s]->fields[f].data(), row * static_cast<size_t>(keep));
    }
    out.push_back(t);
  }
  append_masks(specs, padding, kept, padded, out);
  return out;
}

void append_masks(const std::vector<FieldSpec>& specs, const std::vector<FieldPadding>& padding,
                  const std::vector<std::vector<int64_t>>& kept, const std::vector<int64_t>& padded,
                  std::vector<at::Tensor>& out) {
  for (size_t f = 0; f < specs.size(); ++f) {
    if (!specs[f].ragged || padding[f].mask == PadMask::none) continue;
    const auto batch = static_cast<int64_t>(kept[f].size());
    if (padding[f].mask == PadMask::lengths) {
      out.push_back(at::tensor(kept[f], at::kLong));
      continue;
    }
    at::Tensor mask = at::zeros({batch, padded[f]}, at::kLong);
    auto* m = mask.data_ptr<int64_t>();
    for (int64_t s = 0; s < batch; ++s) {
      const int64_t keep = kept[f][static_cast<size_t>(s)];
      std::fill_n(m + s * padded[f] + first_row(padding[f], keep, padded[f]), keep, 1);
    }
    out.push_back(mask);
  }
}

}  // namespace accel::data
