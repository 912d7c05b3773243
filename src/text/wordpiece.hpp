// tokenizers' WordPiece model: greedy longest-match-first within a word, pieces after the first
// looked up with the continuing prefix ("##"); a word longer than max_input_chars_per_word
// characters, or one with a part no vocabulary entry matches, is the unknown token alone.
// Pure logic; immutable once made.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel::text {

struct WordPiece {
  std::unordered_map<std::string, int64_t> vocab;  // UTF-8 token -> id
  int64_t unk_id = 0;
  std::string continuing_prefix = "##";
  size_t max_input_chars_per_word = 100;

  // Appends the ids of `word` (one pre-tokenized word, in code points) to `out`.
  void tokenize(const std::u32string& word, std::vector<int64_t>& out) const;
};

}  // namespace accel::text
