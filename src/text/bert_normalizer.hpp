// tokenizers' BertNormalizer (0.19.1): clean_text, handle_chinese_chars, strip_accents, lowercase,
// in that order. Pure logic.
#pragma once

#include <optional>
#include <string>

namespace accel::text {

struct BertNormalizerOptions {
  bool clean_text = true;  // drop NUL, U+FFFD and Cc/Cf/Co but \t \n \r; whitespace -> ' '
  bool handle_chinese_chars = true;   // a space either side of each CJK ideograph
  std::optional<bool> strip_accents;  // NFD, then no Mn; unset: follows lowercase
  bool lowercase = true;              // per character, full mapping
};

std::u32string bert_normalize(const std::u32string& text, const BertNormalizerOptions& options);

}  // namespace accel::text
