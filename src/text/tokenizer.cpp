// Encoding: added tokens, then normalise, pre-tokenise and WordPiece each stretch between them.
#include "text/tokenizer.hpp"

#include "common/error.hpp"
#include "text/bert_pre_tokenizer.hpp"
#include "text/unicode.hpp"

namespace accel::text {
namespace {

// The longest added token starting at `pos` (tokenizers matches leftmost-longest), or null.
const AddedToken* added_at(const std::vector<AddedToken>& added, std::string_view text,
                           size_t pos) {
  const AddedToken* best = nullptr;
  for (const auto& t : added)
    if (!t.content.empty() && text.compare(pos, t.content.size(), t.content) == 0 &&
        (!best || t.content.size() > best->content.size()))
      best = &t;
  return best;
}

}  // namespace

std::vector<int64_t> Tokenizer::encode(std::string_view utf8, size_t max_length) const {
  const size_t specials = prefix.size() + suffix.size();
  if (max_length != 0 && max_length < specials)
    fail(Errc::invalid_argument, "max_length " + std::to_string(max_length) + " cannot hold the " +
                                     std::to_string(specials) +
                                     " special tokens every encoding has");
  decode_utf8(utf8);  // the whole text is checked before any work
  std::vector<int64_t> ids;
  auto encode_stretch = [&](std::string_view stretch) {
    std::u32string text = decode_utf8(stretch);
    if (normalizer) text = bert_normalize(text, *normalizer);
    for (const auto& word : bert_pre_tokenize(text)) model.tokenize(word, ids);
  };
  size_t start = 0;
  for (size_t pos = 0; pos < utf8.size();) {
    if (const AddedToken* t = added_at(added, utf8, pos)) {
      encode_stretch(utf8.substr(start, pos - start));
      ids.push_back(t->id);
      pos += t->content.size();
      start = pos;
    } else {
      ++pos;
    }
  }
  encode_stretch(utf8.substr(start));
  if (max_length != 0 && ids.size() > max_length - specials) ids.resize(max_length - specials);
  std::vector<int64_t> out(prefix);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix.begin(), suffix.end());
  return out;
}

std::optional<int64_t> Tokenizer::token_id(const std::string& token) const {
  for (const auto& t : added)
    if (t.content == token) return t.id;
  const auto it = model.vocab.find(token);
  if (it == model.vocab.end()) return std::nullopt;
  return it->second;
}

size_t Tokenizer::vocab_size() const {
  size_t n = model.vocab.size();
  for (const auto& t : added)
    if (!model.vocab.count(t.content)) ++n;
  return n;
}

}  // namespace accel::text
