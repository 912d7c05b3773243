// Text data through the C interface, in a world of one: ragged fields padded per batch with their
// masks, the padding options, truncation and its errors, length grouping, and the single-process
// answers of split_between_processes and the trigger (tests/mp runs them on several processes).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "accel/accel.h"
#include "accelerator_env.hpp"

namespace {

// Sample i: tokens 100 * i + j for j < length(i) (ragged, int64) and the label i (int64 scalar).
struct Corpus {
  std::vector<int64_t> lengths;
  int32_t fail_length_at = -1;
};

int32_t corpus_lengths(int64_t index, int64_t* lengths, size_t count, void* user) {
  auto* c = static_cast<Corpus*>(user);
  if (count != 2 || index == c->fail_length_at) return 7;
  lengths[0] = c->lengths[static_cast<size_t>(index)];
  return 0;
}

int32_t corpus_fill(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                    void* user) {
  auto* c = static_cast<Corpus*>(user);
  const int64_t length = c->lengths[static_cast<size_t>(index)];
  if (count != 2 || sizes[0] != static_cast<size_t>(length) * 8 || sizes[1] != 8) return 9;
  auto* tokens = static_cast<int64_t*>(buffers[0]);
  for (int64_t j = 0; j < length; ++j) tokens[j] = 100 * index + j;
  *static_cast<int64_t*>(buffers[1]) = index;
  return 0;
}

accel_dataset* corpus_dataset(Corpus* c) {
  const accel_dtype dtypes[] = {ACCEL_DTYPE_I64, ACCEL_DTYPE_I64};
  const size_t dim_counts[] = {1, 0};
  const int64_t dims[] = {ACCEL_RAGGED};
  accel_dataset* d = nullptr;
  EXPECT_EQ(accel_dataset_from_ragged_callback(static_cast<int64_t>(c->lengths.size()), 2, dtypes,
                                               dim_counts, dims, corpus_lengths, corpus_fill, c,
                                               nullptr, &d),
            ACCEL_OK)
      << accel_last_error_message();
  return d;
}

accel_dataloader* loader_over(accel_dataset* d,
                              std::initializer_list<std::pair<const char*, const char*>> opts) {
  accel_dataloader* dl = nullptr;
  EXPECT_EQ(accel_dataloader_new(g_acc, d, &dl), ACCEL_OK);
  for (const auto& [k, v] : opts)
    EXPECT_EQ(accel_dataloader_set(dl, k, v), ACCEL_OK) << k << ": " << accel_last_error_message();
  return dl;
}

struct Batch {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<int64_t>> values;
};

// The next batch's fields (shapes and int64 values); empty at the end of the epoch.
Batch next_batch(accel_dataloader* dl, accel_status expected = ACCEL_OK) {
  accel_tensor* f[4] = {};
  size_t n = 0;
  Batch b;
  const accel_status st = accel_dataloader_next(dl, f, 4, &n);
  EXPECT_EQ(st, expected) << accel_last_error_message();
  for (size_t i = 0; st == ACCEL_OK && i < n; ++i) {
    int64_t shape[4];
    size_t dims = 0;
    EXPECT_EQ(accel_tensor_shape(f[i], shape, 4, &dims), ACCEL_OK);
    b.shapes.emplace_back(shape, shape + dims);
    b.values.push_back(values_of<int64_t>(f[i]));
    accel_tensor_free(f[i]);
  }
  return b;
}

using V = std::vector<int64_t>;

bool error_mentions(const std::string& part) {
  return std::string(accel_last_error_message()).find(part) != std::string::npos;
}

}  // namespace

TEST(Ragged, BatchesArePaddedToTheLongestWithAnAttentionMask) {
  Corpus c{{2, 0, 3, 1, 4}};
  accel_dataset* d = corpus_dataset(&c);
  accel_dataloader* dl = loader_over(d, {{"batch_size", "3"}});
  size_t fields = 0;
  OK(accel_dataloader_field_count(dl, &fields));
  EXPECT_EQ(fields, 3u);  // tokens, label, the tokens' attention mask
  Batch b = next_batch(dl);
  ASSERT_EQ(b.values.size(), 3u);
  EXPECT_EQ(b.shapes[0], (V{3, 3}));
  EXPECT_EQ(b.values[0], (V{0, 1, 0, 0, 0, 0, 200, 201, 202}));
  EXPECT_EQ(b.values[1], (V{0, 1, 2}));
  EXPECT_EQ(b.values[2], (V{1, 1, 0, 0, 0, 0, 1, 1, 1}));
  b = next_batch(dl);  // the short last batch: padded to its own longest
  EXPECT_EQ(b.shapes[0], (V{2, 4}));
  EXPECT_EQ(b.values[0], (V{300, 0, 0, 0, 400, 401, 402, 403}));

  // Left padding with -1 to a multiple of 4, and lengths instead of the mask.
  OK(accel_dataloader_set_field(dl, 0, "padding_side", "left"));
  OK(accel_dataloader_set(dl, "pad_value", "-1"));
  OK(accel_dataloader_set(dl, "pad_to_multiple_of", "4"));
  OK(accel_dataloader_set_field(dl, 0, "mask", "lengths"));
  OK(accel_dataloader_set_epoch(dl, 0));
  b = next_batch(dl);
  EXPECT_EQ(b.shapes[0], (V{3, 4}));
  EXPECT_EQ(b.values[0], (V{-1, -1, 0, 1, -1, -1, -1, -1, -1, 200, 201, 202}));
  EXPECT_EQ(b.shapes[2], (V{3}));
  EXPECT_EQ(b.values[2], (V{2, 0, 3}));

  OK(accel_dataloader_set(dl, "mask", "none"));
  OK(accel_dataloader_field_count(dl, &fields));
  EXPECT_EQ(fields, 2u);
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(Ragged, AboveMaxLengthIsAnErrorNamingTheSampleUnlessTruncated) {
  Corpus c{{2, 5, 1}};
  accel_dataset* d = corpus_dataset(&c);
  accel_dataloader* dl = loader_over(d, {{"batch_size", "1"}, {"max_length", "3"}});
  EXPECT_EQ(next_batch(dl).values[0], (V{0, 1}));
  next_batch(dl, ACCEL_ERR_SHAPE);
  EXPECT_TRUE(error_mentions("sample 1, field 0 has length 5, above max_length 3"))
      << accel_last_error_message();
  // Nothing lost: the epoch starts again from its first sample.
  EXPECT_EQ(next_batch(dl).values[0], (V{0, 1}));

  OK(accel_dataloader_set(dl, "truncation", "true"));
  OK(accel_dataloader_set(dl, "batch_size", "3"));
  Batch b = next_batch(dl);
  EXPECT_EQ(b.shapes[0], (V{3, 3}));
  EXPECT_EQ(b.values[0], (V{0, 1, 0, 100, 101, 102, 200, 0, 0}));
  EXPECT_EQ(b.values[2], (V{1, 1, 0, 1, 1, 1, 1, 0, 0}));
  OK(accel_dataloader_set_field(dl, 0, "padding_side", "left"));
  b = next_batch(dl);
  EXPECT_EQ(b.values[0], (V{0, 0, 1, 100, 101, 102, 0, 0, 200}));
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(Ragged, BadLengthsAndFailingLengthCallbacksEndTheEpochWithAClearError) {
  Corpus c{{2, -4, 1}};
  accel_dataset* d = corpus_dataset(&c);
  accel_dataloader* dl = loader_over(d, {{"batch_size", "3"}});
  next_batch(dl, ACCEL_ERR_SHAPE);
  EXPECT_TRUE(error_mentions("sample 1, field 0: the length callback reported -4"))
      << accel_last_error_message();
  c.lengths[1] = int64_t{1} << 40;
  next_batch(dl, ACCEL_ERR_SHAPE);
  EXPECT_TRUE(error_mentions("above the largest accepted")) << accel_last_error_message();
  c.lengths[1] = 1;
  c.fail_length_at = 2;
  next_batch(dl, ACCEL_ERR_CALLBACK);
  EXPECT_TRUE(error_mentions("length callback returned 7 for index 2"))
      << accel_last_error_message();
  c.fail_length_at = -1;
  EXPECT_EQ(next_batch(dl).shapes[0], (V{3, 2}));
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(Ragged, DeclarationsAndOptionsAreChecked) {
  const accel_dtype dtypes[] = {ACCEL_DTYPE_I64, ACCEL_DTYPE_F32};
  const size_t dim_counts[] = {1, 1};
  const int64_t ragged_both[] = {ACCEL_RAGGED, 3};
  Corpus c{{1, 2}};
  accel_dataset* d = nullptr;
  // Without a length callback, or through the fixed-shape constructor.
  EXPECT_EQ(accel_dataset_from_ragged_callback(2, 2, dtypes, dim_counts, ragged_both, nullptr,
                                               corpus_fill, &c, nullptr, &d),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_mentions("needs a length callback")) << accel_last_error_message();
  EXPECT_EQ(accel_dataset_from_callback(2, 2, dtypes, dim_counts, ragged_both, corpus_fill, &c,
                                        nullptr, &d),
            ACCEL_ERR_SHAPE);
  EXPECT_TRUE(error_mentions("accel_dataset_from_ragged_callback")) << accel_last_error_message();
  const size_t two_dims[] = {2, 0};
  const int64_t ragged_second[] = {2, ACCEL_RAGGED};
  EXPECT_EQ(accel_dataset_from_ragged_callback(2, 2, dtypes, two_dims, ragged_second,
                                               corpus_lengths, corpus_fill, &c, nullptr, &d),
            ACCEL_ERR_SHAPE);
  EXPECT_EQ(d, nullptr);

  // Padding options need a ragged field; group_by_length too.
  d = corpus_dataset(&c);
  accel_dataloader* dl = loader_over(d, {});
  EXPECT_EQ(accel_dataloader_set_field(dl, 1, "pad_value", "0"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_mentions("field 1 is not ragged")) << accel_last_error_message();
  EXPECT_EQ(accel_dataloader_set_field(dl, 2, "pad_value", "0"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_dataloader_set(dl, "padding_side", "centre"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_mentions("allowed: right, left")) << accel_last_error_message();
  accel_dataloader_free(dl);
  accel_dataset_free(d);

  std::vector<int64_t> v{1, 2, 3};
  const int64_t n = 3;
  accel_tensor* t = nullptr;
  OK(accel_tensor_from_data(v.data(), 24, ACCEL_DTYPE_I64, &n, 1, &t));
  OK(accel_dataset_from_tensors(&t, 1, &d));
  accel_tensor_free(t);
  OK(accel_dataloader_new(g_acc, d, &dl));
  EXPECT_EQ(accel_dataloader_set(dl, "group_by_length", "true"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_dataloader_set(dl, "max_length", "4"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(error_mentions("this dataset has none")) << accel_last_error_message();
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(Ragged, LengthGroupingGivesBatchesOfSimilarLengthsLongestFirst) {
  Corpus c;
  for (int64_t i = 0; i < 64; ++i) c.lengths.push_back((i * 37) % 23);
  accel_dataset* d = corpus_dataset(&c);
  accel_dataloader* dl = loader_over(
      d, {{"batch_size", "4"}, {"shuffle", "true"}, {"seed", "5"}, {"group_by_length", "true"}});
  int64_t padded_tokens = 0, batches = 0;
  std::vector<int64_t> seen;
  for (Batch b = next_batch(dl); !b.values.empty(); b = next_batch(dl), ++batches) {
    if (batches == 0) {
      EXPECT_EQ(b.shapes[0][1], 22);  // the longest batch comes first
    }
    padded_tokens += b.shapes[0][0] * b.shapes[0][1];
    seen.insert(seen.end(), b.values[1].begin(), b.values[1].end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen.size(), 64u);
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  // Megabatches of 4 x 4 samples sorted by length pad far less than a random order would.
  int64_t real = 0;
  for (int64_t l : c.lengths) real += l;
  EXPECT_LT(padded_tokens, real + real / 4) << "padded " << padded_tokens << " for " << real;
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(TextInference, SplitAndTriggerInAWorldOfOne) {
  size_t n = 0;
  EXPECT_EQ(accel_split_between_processes(g_acc, 5, true, nullptr, 0, &n),
            ACCEL_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, 5u);
  std::vector<int64_t> idx(n);
  OK(accel_split_between_processes(g_acc, 5, true, idx.data(), idx.size(), &n));
  EXPECT_EQ(idx, (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(accel_split_between_processes(g_acc, 5, false, idx.data(), 2, &n),
            ACCEL_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(accel_split_between_processes(g_acc, -1, false, nullptr, 0, &n),
            ACCEL_ERR_INVALID_ARGUMENT);
  accel_tensor* scalar = nullptr;
  accel_tensor* out = nullptr;
  const float one = 1;
  OK(accel_tensor_from_data(&one, 4, ACCEL_DTYPE_F32, nullptr, 0, &scalar));
  EXPECT_EQ(accel_split_tensor_between_processes(g_acc, scalar, false, &out), ACCEL_ERR_SHAPE);
  accel_tensor_free(scalar);

  bool stop = true;
  OK(accel_check_trigger(g_acc, &stop));
  EXPECT_FALSE(stop);
  OK(accel_set_trigger(g_acc));
  OK(accel_check_trigger(g_acc, &stop));
  EXPECT_TRUE(stop);
  OK(accel_check_trigger(g_acc, &stop));
  EXPECT_FALSE(stop);
  EXPECT_EQ(accel_set_trigger(nullptr), ACCEL_ERR_INVALID_ARGUMENT);
}
