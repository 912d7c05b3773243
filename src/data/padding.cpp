#include "data/padding.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::data {

namespace {

[[noreturn]] void bad_value(const std::string& key, const std::string& value,
                            const std::string& allowed) {
  fail(Errc::invalid_argument,
       "padding option '" + key + "': invalid value '" + value + "'; allowed: " + allowed);
}

int64_t positive(const std::string& key, const std::string& value) {
  long long v = 0;
  if (!parse_int(value, &v) || v < 1 || v > kMaxSampleLength)
    bad_value(key, value, "an integer from 1 to " + std::to_string(kMaxSampleLength));
  return v;
}

}  // namespace

bool is_padding_option(const std::string& key) {
  return key == "pad_value" || key == "padding_side" || key == "pad_to_multiple_of" ||
         key == "max_length" || key == "truncation" || key == "mask";
}

void set_padding_option(FieldPadding& p, const std::string& key, const std::string& value) {
  if (key == "pad_value") {
    if (!parse_real(value, &p.pad_value)) bad_value(key, value, "a finite number");
  } else if (key == "padding_side") {
    if (value != "right" && value != "left") bad_value(key, value, "right, left");
    p.pad_left = value == "left";
  } else if (key == "pad_to_multiple_of") {
    p.pad_to_multiple_of = positive(key, value);
  } else if (key == "max_length") {
    p.max_length = value == "none" ? -1 : positive(key, value);
  } else if (key == "truncation") {
    if (value != "true" && value != "false") bad_value(key, value, "true, false");
    p.truncation = value == "true";
  } else if (key == "mask") {
    if (value == "attention_mask")
      p.mask = PadMask::attention_mask;
    else if (value == "lengths")
      p.mask = PadMask::lengths;
    else if (value == "none")
      p.mask = PadMask::none;
    else
      bad_value(key, value, "attention_mask, lengths, none");
  } else {
    fail(Errc::invalid_argument,
         "unknown padding option '" + key +
             "'; known: pad_value, padding_side, pad_to_multiple_of, max_length, truncation, mask");
  }
}

int64_t kept_length(const FieldPadding& p, int64_t length, int64_t index, size_t field) {
  const std::string where = "sample " + std::to_string(index) + ", field " + std::to_string(field);
  if (length < 0)
    fail(Errc::shape, where + ": the length callback reported " + std::to_string(length) +
                          "; a length is at least 0");
  if (length > kMaxSampleLength)
    fail(Errc::shape, where + ": the length callback reported " + std::to_string(length) +
                          ", above the largest accepted (" + std::to_string(kMaxSampleLength) +
                          ")");
  if (p.max_length >= 0 && length > p.max_length) {
    if (!p.truncation)
      fail(Errc::shape, where + " has length " + std::to_string(length) + ", above max_length " +
                            std::to_string(p.max_length) +
                            "; set truncation to true to keep its first max_length rows");
    return p.max_length;
  }
  return length;
}

int64_t padded_length(const FieldPadding& p, const std::vector<int64_t>& kept) {
  const int64_t longest = kept.empty() ? 0 : *std::max_element(kept.begin(), kept.end());
  const int64_t m = p.pad_to_multiple_of;
  return (longest + m - 1) / m * m;
}

}  // namespace accel::data
