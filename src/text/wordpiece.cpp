#include "text/wordpiece.hpp"

#include "text/unicode.hpp"

namespace accel::text {

void WordPiece::tokenize(const std::u32string& word, std::vector<int64_t>& out) const {
  if (word.size() > max_input_chars_per_word) {
    out.push_back(unk_id);
    return;
  }
  // Byte offset of each character in the word's UTF-8, so that pieces are substrings.
  const std::string utf8 = encode_utf8(word);
  std::vector<size_t> at(word.size() + 1, utf8.size());
  for (size_t i = 0, b = 0; i < word.size(); ++i) {
    at[i] = b;
    b += word[i] < 0x80 ? 1 : word[i] < 0x800 ? 2 : word[i] < 0x10000 ? 3 : 4;
  }
  const size_t mark = out.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    const std::unordered_map<std::string, int64_t>::const_iterator none = vocab.end();
    auto found = none;
    for (; end > start; --end) {
      piece.assign(start > 0 ? continuing_prefix : std::string());
      piece.append(utf8, at[start], at[end] - at[start]);
      found = vocab.find(piece);
      if (found != none) break;
    }
    if (found == none) {  // no piece matches: the whole word is unknown
      out.resize(mark);
      out.push_back(unk_id);
      return;
    }
    out.push_back(found->second);
    start = end;
  }
}

}  // namespace accel::text
