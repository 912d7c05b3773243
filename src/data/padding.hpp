// Collate of ragged fields as pure arithmetic (no LibTorch): the options that say how a batch of
// variable-length samples is padded to one length, that length, and where each sample's rows go.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::data {

// What the collate adds after the dataset's fields for a ragged field.
enum class PadMask {
  attention_mask,  // int64 [batch, padded]: 1 on a sample's rows, 0 on padding (Hugging Face's)
  lengths,         // int64 [batch]: each sample's length after truncation
  none,
};

struct FieldPadding {
  double pad_value = 0;
  bool pad_left = false;  // padding_side "left": the padding goes before the sample's rows
  int64_t pad_to_multiple_of = 1;
  int64_t max_length = -1;  // -1: none
  bool truncation = false;  // longer than max_length: keep its first max_length rows, or an error
  PadMask mask = PadMask::attention_mask;
};

// The longest length a sample may report: beyond it the sample is refused as implausible.
constexpr int64_t kMaxSampleLength = int64_t{1} << 32;

// True for the keys set_padding_option knows.
bool is_padding_option(const std::string& key);

// Sets one option by key: pad_value, padding_side (right, left), pad_to_multiple_of (>= 1),
// max_length (>= 1, or "none"), truncation (true, false), mask (attention_mask, lengths, none).
// Throws accel::Error(invalid_argument) naming the key and the allowed values.
void set_padding_option(FieldPadding& padding, const std::string& key, const std::string& value);

// The rows of a sample of `length` that the batch keeps. Throws accel::Error(shape) naming the
// sample index and field for a negative or implausible length, or for one above max_length
// without truncation.
int64_t kept_length(const FieldPadding& padding, int64_t length, int64_t index, size_t field);

// The length a batch is padded to: its longest kept length, rounded up to pad_to_multiple_of.
int64_t padded_length(const FieldPadding& padding, const std::vector<int64_t>& kept);

// The row of the padded field where a sample's first row goes.
inline int64_t first_row(const FieldPadding& padding, int64_t kept, int64_t padded) {
  return padding.pad_left ? padded - kept : 0;
}

}  // namespace accel::data
