// Samples held in memory (a stream's) made into one batch: fixed fields stacked, ragged fields
// padded as their FieldPadding says, then the masks the padding asks for.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "data/dataset.hpp"
#include "data/padding.hpp"

namespace accel::data {

// One sample: each field's bytes, row-major in the field's dtype; `rows[f]` is a ragged field's
// first dimension (unused for fixed fields).
struct Sample {
  std::vector<std::vector<unsigned char>> fields;
  std::vector<int64_t> rows;
};

// Bytes of one row of a field: one sample of a fixed field, one step of a ragged one.
size_t row_bytes(const FieldSpec& field);

// The batch of `samples` (in order); `positions` name them in errors (a sample above max_length).
std::vector<at::Tensor> collate(const std::vector<const Sample*>& samples,
                                const std::vector<int64_t>& positions,
                                const std::vector<FieldSpec>& specs,
                                const std::vector<FieldPadding>& padding);

// After the fields: per ragged field whose padding asks for one, its attention mask (int64
// [batch, padded]) or lengths (int64 [batch]); `kept[f]` holds each sample's kept length.
void append_masks(const std::vector<FieldSpec>& specs, const std::vector<FieldPadding>& padding,
                  const std::vector<std::vector<int64_t>>& kept, const std::vector<int64_t>& padded,
                  std::vector<at::Tensor>& out);

}  // namespace accel::data
