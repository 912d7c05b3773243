// tokenizers' BertPreTokenizer: words split at whitespace (removed), each punctuation character a
// word of its own. Pure logic.
#pragma once

#include <string>
#include <vector>

namespace accel::text {

std::vector<std::u32string> bert_pre_tokenize(const std::u32string& text);

}  // namespace accel::text
