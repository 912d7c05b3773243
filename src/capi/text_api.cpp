// accel_tokenizer_*: Hugging Face's BERT WordPiece tokenizer (src/text) behind the C ABI.
#include <ATen/ATen.h>

#include <algorithm>

#include "capi/handles.hpp"
#include "text/tokenizer.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::guarded;
using accel::capi::require;

// Immutable once loaded (accel.h, "Threads"): no lock.
struct accel_tokenizer {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kTokenizer);
  accel::text::Tokenizer core;
};

namespace accel::capi {
template <>
inline Tag tag_of<accel_tokenizer>() {
  return Tag::kTokenizer;
}
}  // namespace accel::capi

namespace {

// Rows of ids as [rows, longest] int64 tensors: the ids padded with `pad`, and the mask.
std::pair<at::Tensor, at::Tensor> padded(const std::vector<std::vector<int64_t>>& rows,
                                         int64_t pad) {
  size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  const auto shape =
      std::vector<int64_t>{static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)};
  at::Tensor ids = at::full(shape, pad, at::kLong);
  at::Tensor mask = at::zeros(shape, at::kLong);
  auto* id = ids.data_ptr<int64_t>();
  auto* m = mask.data_ptr<int64_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), id + i * longest);
    std::fill_n(m + i * longest, rows[i].size(), int64_t{1});
  }
  return {ids, mask};
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_tokenizer_load(const char* path, accel_tokenizer** out) {
  return guarded([&] {
    require(path, "path");
    require(out, "out");
    auto tok = std::make_unique<accel_tokenizer>();
    tok->core = accel::text::Tokenizer::load(path);
    *out = tok.release();
  });
}

ACCEL_API accel_status accel_tokenizer_encode(const accel_tokenizer* tok, const char* text,
                                              size_t max_length, int64_t* ids, size_t capacity,
                                              size_t* out_count) {
  return guarded([&] {
    checked(tok, "tok");
    require(text, "text");
    require(out_count, "out_count");
    const auto encoded = tok->core.encode(text, max_length);
    accel::capi::require_capacity(encoded.size(), ids, capacity, out_count, "out_count", "ids");
    std::copy(encoded.begin(), encoded.end(), ids);
  });
}

ACCEL_API accel_status accel_tokenizer_encode_batch(const accel_tokenizer* tok,
                                                    const char* const* texts, size_t count,
                                                    size_t max_length, accel_tensor** input_ids,
                                                    accel_tensor** attention_mask) {
  return guarded([&] {
    checked(tok, "tok");
    require(texts, "texts");
    require(input_ids, "input_ids");
    require(attention_mask, "attention_mask");
    if (count == 0) fail(Errc::invalid_argument, "count is 0: a batch needs at least one text");
    if (!tok->core.pad_id) fail(Errc::invalid_argument, "the tokenizer has no [PAD] token");
    std::vector<std::vector<int64_t>> rows(count);
    for (size_t i = 0; i < count; ++i) {
      if (!texts[i]) fail(Errc::invalid_argument, "texts[" + std::to_string(i) + "] is NULL");
      try {
        rows[i] = tok->core.encode(texts[i], max_length);
      } catch (const accel::Error& e) {
        fail(e.code(), "texts[" + std::to_string(i) + "]: " + e.what());
      }
    }
    auto [ids, mask] = padded(rows, *tok->core.pad_id);
    std::unique_ptr<accel_tensor> ids_handle(accel::capi::new_tensor(ids));
    std::unique_ptr<accel_tensor> mask_handle(accel::capi::new_tensor(mask));
    *input_ids = ids_handle.release();
    *attention_mask = mask_handle.release();
  });
}

ACCEL_API accel_status accel_tokenizer_token_id(const accel_tokenizer* tok, const char* token,
                                                int64_t* out) {
  return guarded([&] {
    checked(tok, "tok");
    require(token, "token");
    require(out, "out");
    const auto id = tok->core.token_id(token);
    if (!id) fail(Errc::invalid_argument, std::string("no token '") + token + "' in the tokenizer");
    *out = *id;
  });
}

ACCEL_API accel_status accel_tokenizer_vocab_size(const accel_tokenizer* tok, size_t* out) {
  return accel::capi::query(tok, "tok", out,
                            [](const accel_tokenizer& t) { return t.core.vocab_size(); });
}

ACCEL_API void accel_tokenizer_free(accel_tokenizer* tok) {
  accel::capi::free_handle(tok, "tok");
}

}  // extern "C"
