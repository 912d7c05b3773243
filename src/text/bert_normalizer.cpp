#include "text/bert_normalizer.hpp"

#include "text/unicode.hpp"

namespace accel::text {

std::u32string bert_normalize(const std::u32string& text, const BertNormalizerOptions& options) {
  std::u32string s;
  s.reserve(text.size());
  // tokenizers filters first, then maps: \v, \f and U+0085 are controls and go, not spaces.
  for (char32_t c : text) {
    if (options.clean_text) {
      const bool tab_or_newline = c == '\t' || c == '\n' || c == '\r';
      if (c == 0 || c == 0xFFFD || (!tab_or_newline && is_other(c))) continue;
      if (is_whitespace(c)) c = ' ';
    }
    if (options.handle_chinese_chars && is_cjk(c)) {
      s += ' ';
      s += c;
      s += ' ';
    } else {
      s += c;
    }
  }
  if (options.strip_accents.value_or(options.lowercase)) {
    std::u32string decomposed = nfd(s);
    s.clear();
    for (char32_t c : decomposed)
      if (!is_nonspacing_mark(c)) s += c;
  }
  if (options.lowercase) {
    std::u32string lower;
    lower.reserve(s.size());
    for (char32_t c : s) append_lowercase(c, lower);
    s = std::move(lower);
  }
  return s;
}

}  // namespace accel::text
