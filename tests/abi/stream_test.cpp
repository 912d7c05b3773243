// Streams through the C interface, in a world of one: a callback stream with a ragged field, epochs
// restarting the stream, the cursor and a resume, a stream failing mid-epoch (nothing lost), the
// lines of a text file, and bad writes. tests/mp runs the sharding on several processes.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "accel/accel.h"
#include "accelerator_env.hpp"

namespace {

// Sample p of every epoch: tokens p, p+1, ... (p % 4 of them) and the label 1000 * epoch + p.
struct Source {
  int64_t length = 10;
  int64_t fail_at = -1;  // the position whose call fails (once)
  int64_t restarts = 0;  // calls with position 0
  int64_t calls = 0;
};

int32_t produce(int64_t epoch, int64_t position, accel_sample* sample, void* user) {
  auto* s = static_cast<Source*>(user);
  ++s->calls;
  if (position == 0) ++s->restarts;
  if (position == s->fail_at) {
    s->fail_at = -1;
    return 5;
  }
  if (position >= s->length) return 1;
  std::vector<int64_t> tokens;
  for (int64_t j = 0; j < position % 4; ++j) tokens.push_back(position + j);
  const int64_t label = 1000 * epoch + position;
  if (accel_sample_set_field(sample, 0, tokens.data(), tokens.size() * 8) != ACCEL_OK) return 7;
  if (accel_sample_set_field(sample, 1, &label, 8) != ACCEL_OK) return 8;
  return 0;
}

accel_dataset* source_stream(Source* s) {
  const accel_dtype dtypes[] = {ACCEL_DTYPE_I64, ACCEL_DTYPE_I64};
  const size_t dim_counts[] = {1, 0};
  const int64_t dims[] = {ACCEL_RAGGED};
  accel_dataset* d = nullptr;
  EXPECT_EQ(accel_dataset_from_stream(2, dtypes, dim_counts, dims, produce, s, nullptr, &d),
            ACCEL_OK)
      << accel_last_error_message();
  return d;
}

accel_dataloader* loader_of(accel_dataset* d, const char* batch, const char* workers = "0") {
  accel_dataloader* dl = nullptr;
  EXPECT_EQ(accel_dataloader_new(g_acc, d, &dl), ACCEL_OK);
  EXPECT_EQ(accel_dataloader_set(dl, "batch_size", batch), ACCEL_OK);
  EXPECT_EQ(accel_dataloader_set(dl, "num_workers", workers), ACCEL_OK);
  return dl;
}

// The labels (field 1) of the next batch; empty at the end of the epoch.
std::vector<int64_t> next_labels(accel_dataloader* dl, accel_status expected = ACCEL_OK) {
  accel_tensor* f[3] = {};
  size_t n = 0;
  const accel_status st = accel_dataloader_next(dl, f, 3, &n);
  EXPECT_EQ(st, expected) << accel_last_error_message();
  std::vector<int64_t> labels;
  if (st != ACCEL_OK) return labels;
  if (n > 0) labels = values_of<int64_t>(f[1]);
  for (size_t i = 0; i < n; ++i) accel_tensor_free(f[i]);
  return labels;
}

using V = std::vector<int64_t>;

}  // namespace

TEST(Stream, EpochsRestartTheStreamAndTheLastBatchIsKnownBeforeItIsUsed) {
  for (const char* workers : {"0", "2"}) {
    Source s;
    accel_dataset* d = source_stream(&s);
    int64_t count = 0, batches = 0;
    OK(accel_dataset_sample_count(d, &count));
    EXPECT_EQ(count, -1);
    accel_dataloader* dl = loader_of(d, "4", workers);
    OK(accel_dataloader_batch_count(dl, &batches));
    EXPECT_EQ(batches, -1);
    EXPECT_EQ(next_labels(dl), (V{0, 1, 2, 3}));
    bool end = true;
    OK(accel_dataloader_end_of_epoch(dl, &end));
    EXPECT_FALSE(end);
    EXPECT_EQ(next_labels(dl), (V{4, 5, 6, 7}));
    EXPECT_EQ(next_labels(dl), (V{8, 9}));  // one process: the short batch as it is
    OK(accel_dataloader_end_of_epoch(dl, &end));
    EXPECT_TRUE(end) << workers;
    int64_t remainder = 0, epoch = -1, samples = -1;
    OK(accel_dataloader_remainder(dl, &remainder));
    EXPECT_EQ(remainder, 2);
    EXPECT_EQ(next_labels(dl), V{});
    EXPECT_EQ(next_labels(dl), (V{1000, 1001, 1002, 1003})) << "epoch 1 reads from the start";
    OK(accel_dataloader_position(dl, &epoch, &samples));
    EXPECT_EQ(epoch, 1);
    EXPECT_EQ(samples, 4);
    EXPECT_EQ(s.restarts, 2);
    accel_dataloader_free(dl);
    accel_dataset_free(d);
  }
}

TEST(Stream, RaggedTokensArePaddedAndAResumeSkipsWhatWasConsumed) {
  Source s;
  accel_dataset* d = source_stream(&s);
  accel_dataloader* dl = loader_of(d, "3");
  accel_tensor* f[3] = {};
  size_t n = 0;
  OK(accel_dataloader_next(dl, f, 3, &n));
  ASSERT_EQ(n, 3u);                                            // tokens, label, attention mask
  EXPECT_EQ(values_of<int64_t>(f[0]), (V{0, 0, 1, 0, 2, 3}));  // lengths 0, 1, 2
  EXPECT_EQ(values_of<int64_t>(f[2]), (V{0, 0, 1, 0, 1, 1}));
  for (size_t i = 0; i < n; ++i) accel_tensor_free(f[i]);
  int64_t epoch = 0, samples = 0;
  OK(accel_dataloader_position(dl, &epoch, &samples));
  EXPECT_EQ(samples, 3);
  accel_dataloader_free(dl);

  // A new loader continues at the saved cursor: the stream is read from 0, the first 3 dropped.
  dl = loader_of(d, "3");
  OK(accel_dataloader_set_position(dl, epoch, samples));
  EXPECT_EQ(next_labels(dl), (V{3, 4, 5}));
  OK(accel_dataloader_skip_first_batches(dl, 3));
  EXPECT_EQ(next_labels(dl), (V{9}));
  EXPECT_EQ(next_labels(dl), V{});
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(Stream, AFailureMidEpochLosesNothingAndTheNextCallGoesOn) {
  for (const char* workers : {"0", "1"}) {
    Source s;
    s.fail_at = 6;
    accel_dataset* d = source_stream(&s);
    accel_dataloader* dl = loader_of(d, "4", workers);
    EXPECT_EQ(next_labels(dl), (V{0, 1, 2, 3}));
    // The batch of 4..7 fails at 6; the cursor stays after the batch already returned.
    next_labels(dl, ACCEL_ERR_CALLBACK);
    EXPECT_NE(std::string(accel_last_error_message()).find("returned 5 for sample 6 of epoch 0"),
              std::string::npos)
        << accel_last_error_message();
    int64_t epoch = -1, samples = -1;
    OK(accel_dataloader_position(dl, &epoch, &samples));
    EXPECT_EQ(samples, 4) << workers;
    EXPECT_EQ(next_labels(dl), (V{4, 5, 6, 7})) << workers;
    EXPECT_EQ(next_labels(dl), (V{8, 9}));
    accel_dataloader_free(dl);
    accel_dataset_free(d);
  }
}

TEST(Stream, LinesOfATextFileAndBadWritesAreClearErrors) {
  const std::string path = ::testing::TempDir() + "stream_lines.txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("first line\r\n\nthird\nno newline at the end", f);
    std::fclose(f);
  }
  accel_dataset* d = nullptr;
  OK(accel_dataset_from_text_lines(path.c_str(), &d));
  accel_dataloader* dl = loader_of(d, "8");
  OK(accel_dataloader_set(dl, "mask", "lengths"));
  accel_tensor* f[2] = {};
  size_t n = 0;
  OK(accel_dataloader_next(dl, f, 2, &n));
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(values_of<int64_t>(f[1]), (V{10, 0, 5, 21}));
  const auto bytes = values_of<uint8_t>(f[0]);
  EXPECT_EQ(std::string(bytes.begin() + 2 * 21, bytes.begin() + 2 * 21 + 5), "third");
  accel_tensor_free(f[0]);
  accel_tensor_free(f[1]);
  accel_dataloader_free(dl);
  accel_dataset_free(d);
  EXPECT_EQ(accel_dataset_from_text_lines((path + ".missing").c_str(), &d), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("stream_lines.txt.missing"),
            std::string::npos);

  // A label of 4 bytes where 8 are due fails the sample with the writer's message.
  struct Bad {
    static int32_t fn(int64_t, int64_t, accel_sample* sample, void*) {
      const int32_t small = 1;
      return accel_sample_set_field(sample, 0, &small, 4) == ACCEL_ERR_SHAPE ? 9 : 0;
    }
  };
  const accel_dtype dtype = ACCEL_DTYPE_I64;
  const size_t dims = 0;
  OK(accel_dataset_from_stream(1, &dtype, &dims, nullptr, Bad::fn, nullptr, nullptr, &d));
  dl = loader_of(d, "2");
  next_labels(dl, ACCEL_ERR_CALLBACK);
  EXPECT_NE(std::string(accel_last_error_message()).find("returned 9"), std::string::npos);
  EXPECT_EQ(accel_dataloader_set(dl, "group_by_length", "true"), ACCEL_ERR_UNSUPPORTED);
  accel_dataloader_free(dl);
  accel_dataset_free(d);

  // A callback that ignores its failed write and returns 0 still fails, with the write's error.
  struct Ignoring {
    static int32_t fn(int64_t, int64_t, accel_sample* sample, void*) {
      const int32_t small = 1;
      accel_sample_set_field(sample, 0, &small, 4);
      return 0;
    }
  };
  OK(accel_dataset_from_stream(1, &dtype, &dims, nullptr, Ignoring::fn, nullptr, nullptr, &d));
  dl = loader_of(d, "2");
  next_labels(dl, ACCEL_ERR_SHAPE);
  EXPECT_NE(std::string(accel_last_error_message()).find("sample 0, field 0: 4 bytes given"),
            std::string::npos)
      << accel_last_error_message();
  accel_dataloader_free(dl);
  accel_dataset_free(d);
  EXPECT_EQ(accel_sample_set_field(nullptr, 0, nullptr, 0), ACCEL_ERR_INVALID_ARGUMENT);
}

TEST(Stream, SaveStateKeepsTheCursorAndLoadStateResumesThere) {
  Source s;
  accel_dataset* d = source_stream(&s);
  accel_dataloader* dl = loader_of(d, "4", "1");
  void* objects[] = {dl};
  OK(accel_prepare(g_acc, objects, 1));
  EXPECT_EQ(next_labels(dl), (V{0, 1, 2, 3}));
  const std::string dir = ::testing::TempDir() + "stream_state";
  OK(accel_save_state(g_acc, dir.c_str()));
  EXPECT_EQ(next_labels(dl), (V{4, 5, 6, 7}));
  EXPECT_EQ(next_labels(dl), (V{8, 9}));
  OK(accel_load_state(g_acc, dir.c_str()));
  EXPECT_EQ(next_labels(dl), (V{4, 5, 6, 7})) << "the stream is read again up to the cursor";
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}
