// A BERT WordPiece tokenizer as Hugging Face's tokenizers (0.19.1) runs one from tokenizer.json:
// the added (special) tokens matched in the raw text first, then, between them, BertNormalizer,
// BertPreTokenizer and WordPiece; the post-processor's template ([CLS] A [SEP]) around the result,
// with truncation at a maximum length that counts the template's tokens. Immutable once loaded,
// so one tokenizer serves any number of threads at once. Pure logic (no LibTorch).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/bert_normalizer.hpp"
#include "text/wordpiece.hpp"

namespace accel::text {

// A token matched in the raw text before normalisation (tokenizers' AddedVocabulary, with
// normalized, lstrip, rstrip and single_word all false: what BERT's special tokens are).
struct AddedToken {
  std::string content;
  int64_t id = 0;
};

struct Tokenizer {
  std::optional<BertNormalizerOptions> normalizer;  // none: the text as it is
  WordPiece model;
  std::vector<AddedToken> added;
  std::vector<int64_t> prefix, suffix;  // the single-sequence template's ids around the text
  std::optional<int64_t> pad_id;

  // Loads tokenizer.json, vocab.txt (with tokenizer_config.json beside it, if any) or a directory
  // holding either (tokenizer.json preferred). A missing or unreadable file or corrupt JSON is
  // Errc::io; a tokenizer of another kind (BPE, a normaliser or pre-tokeniser other than BERT's,
  // an added token with options this code does not follow) Errc::invalid_argument naming it.
  static Tokenizer load(const std::string& path);

  // The ids of `utf8` (strict UTF-8: Errc::invalid_argument otherwise) with the template's
  // tokens; max_length 0: no truncation; otherwise at most max_length ids, the text's cut at
  // its end (below the template's own count: Errc::invalid_argument).
  std::vector<int64_t> encode(std::string_view utf8, size_t max_length = 0) const;

  // The id of `token` (added tokens first, then the vocabulary), if any.
  std::optional<int64_t> token_id(const std::string& token) const;
  // Distinct tokens of the vocabulary and the added tokens (tokenizers' get_vocab_size()).
  size_t vocab_size() const;
};

}  // namespace accel::text
