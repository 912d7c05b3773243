#include "text/bert_pre_tokenizer.hpp"

#include "text/unicode.hpp"

namespace accel::text {

std::vector<std::u32string> bert_pre_tokenize(const std::u32string& text) {
  std::vector<std::u32string> words;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char32_t c : text) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  flush();
  return words;
}

}  // namespace accel::text
