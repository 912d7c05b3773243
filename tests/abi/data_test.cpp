// Datasets and the dataloader through the C interface, in a world of one: IDX files (real
// Fashion-MNIST), callbacks (failing ones too), epochs, prefetching, resume, bad input.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "accel/accel.h"
#include "accelerator_env.hpp"

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist/";

accel_dataset* range_dataset(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_from_data(v.data(), v.size() * 8, ACCEL_DTYPE_I64, &n, 1, &t), ACCEL_OK);
  accel_dataset* d = nullptr;
  EXPECT_EQ(accel_dataset_from_tensors(&t, 1, &d), ACCEL_OK);
  accel_tensor_free(t);
  return d;
}

// One epoch of a one-field loader, as index lists.
std::vector<std::vector<int64_t>> epoch_of(accel_dataloader* dl) {
  std::vector<std::vector<int64_t>> out;
  for (;;) {
    accel_tensor* f[1];
    size_t fields = 0;
    EXPECT_EQ(accel_dataloader_next(dl, f, 1, &fields), ACCEL_OK) << accel_last_error_message();
    if (fields == 0) break;
    out.push_back(values_of<int64_t>(f[0]));
    accel_tensor_free(f[0]);
  }
  return out;
}

accel_dataloader* loader(accel_dataset* d,
                         std::initializer_list<std::pair<const char*, const char*>> opts) {
  accel_dataloader* dl = nullptr;
  EXPECT_EQ(accel_dataloader_new(g_acc, d, &dl), ACCEL_OK);
  for (const auto& [k, v] : opts)
    EXPECT_EQ(accel_dataloader_set(dl, k, v), ACCEL_OK) << k << ": " << accel_last_error_message();
  return dl;
}

}  // namespace

TEST(Data, FashionMnistFromIdxGz) {
  const std::string images = kFashion + "t10k-images-idx3-ubyte.gz";
  const std::string labels = kFashion + "t10k-labels-idx1-ubyte.gz";
  const char* paths[] = {images.c_str(), labels.c_str()};
  accel_dataset* d = nullptr;
  OK(accel_dataset_from_idx(paths, 2, &d));
  int64_t n = 0;
  OK(accel_dataset_sample_count(d, &n));
  EXPECT_EQ(n, 10000);
  accel_dataloader* dl = loader(d, {{"batch_size", "1000"}});
  int64_t len = 0;
  OK(accel_dataloader_batch_count(dl, &len));
  EXPECT_EQ(len, 10);
  std::vector<int64_t> per_class(10, 0);
  for (;;) {
    accel_tensor* f[2];
    size_t fields = 0;
    OK(accel_dataloader_next(dl, f, 2, &fields));
    if (fields == 0) break;
    EXPECT_EQ(fields, 2u);
    int64_t shape[3];
    size_t dims = 0;
    OK(accel_tensor_shape(f[0], shape, 3, &dims));
    EXPECT_EQ(dims, 3u);
    EXPECT_EQ(shape[0], 1000);
    EXPECT_EQ(shape[1], 28);
    EXPECT_EQ(shape[2], 28);
    accel_dtype dt;
    OK(accel_tensor_dtype(f[1], &dt));
    EXPECT_EQ(dt, ACCEL_DTYPE_U8);
    std::vector<uint8_t> y(1000);
    size_t size = 0;
    OK(accel_tensor_to_data(f[1], y.data(), y.size(), &size));
    EXPECT_EQ(size, 1000u);
    for (uint8_t c : y) ++per_class.at(c);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
  }
  for (int64_t c : per_class) EXPECT_EQ(c, 1000) << "Fashion-MNIST's test set is balanced";
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

namespace {

// Every sample of t10k's images and labels, as bytes, read through a dataloader.
std::string t10k_bytes() {
  const std::string images = kFashion + "t10k-images-idx3-ubyte.gz";
  const std::string labels = kFashion + "t10k-labels-idx1-ubyte.gz";
  const char* paths[] = {images.c_str(), labels.c_str()};
  accel_dataset* d = nullptr;
  EXPECT_EQ(accel_dataset_from_idx(paths, 2, &d), ACCEL_OK) << accel_last_error_message();
  accel_dataloader* dl = loader(d, {{"batch_size", "10000"}});
  accel_tensor* f[2];
  size_t fields = 0;
  EXPECT_EQ(accel_dataloader_next(dl, f, 2, &fields), ACCEL_OK);
  std::string out(10000 * 785, '\0');
  size_t size = 0;
  EXPECT_EQ(accel_tensor_to_data(f[0], out.data(), 10000 * 784, &size), ACCEL_OK);
  EXPECT_EQ(accel_tensor_to_data(f[1], out.data() + 10000 * 784, 10000, &size), ACCEL_OK);
  accel_tensor_free(f[0]);
  accel_tensor_free(f[1]);
  accel_dataloader_free(dl);
  accel_dataset_free(d);
  return out;
}

}  // namespace

TEST(Data, IdxFilesAreDecodedOnceIntoTheCacheAndReadFromThereAfter) {
  std::string cache = ::testing::TempDir() + "idx_cacheXXXXXX";
  ASSERT_TRUE(mkdtemp(cache.data()));
  setenv("ACCEL_DATASETS_CACHE", "off", 1);
  const std::string decoded_here = t10k_bytes();
  setenv("ACCEL_DATASETS_CACHE", cache.c_str(), 1);
  const std::string first = t10k_bytes(), second = t10k_bytes();
  unsetenv("ACCEL_DATASETS_CACHE");
  EXPECT_TRUE(first == decoded_here && second == decoded_here)
      << "the same samples with and without the cache";
  int copies = 0;
  if (DIR* dir = opendir(cache.c_str())) {
    while (const dirent* e = readdir(dir))
      copies += std::string(e->d_name).find(".decoded") != std::string::npos;
    closedir(dir);
  }
  EXPECT_EQ(copies, 2) << "one decoded copy per file, made once";
}

TEST(Data, ADatasetCacheThatCannotServeIsNamedAndTheDataStillLoads) {
  std::string cache = ::testing::TempDir() + "idx_open_cacheXXXXXX";
  ASSERT_TRUE(mkdtemp(cache.data()));
  ASSERT_EQ(chmod(cache.c_str(), 0777), 0);  // others may write there: not used
  setenv("ACCEL_DATASETS_CACHE", "off", 1);
  const std::string decoded_here = t10k_bytes();
  setenv("ACCEL_DATASETS_CACHE", cache.c_str(), 1);
  ::testing::internal::CaptureStderr();
  const std::string loaded = t10k_bytes();
  const std::string said = ::testing::internal::GetCapturedStderr();
  unsetenv("ACCEL_DATASETS_CACHE");
  EXPECT_TRUE(loaded == decoded_here) << "the same samples, decoded in this process";
  EXPECT_NE(said.find("decoded into this process's memory"), std::string::npos) << said;
  EXPECT_NE(said.find("others may write to it"), std::string::npos) << said;
  EXPECT_EQ(said.find("decoded into this process's memory"),
            said.rfind("decoded into this process's memory"))
      << "said once: " << said;
  EXPECT_EQ(said.rfind("WARNING: ", 0), 0u) << "in the logger's format: " << said;
}

TEST(Data, BadIdxFilesNameTheFile) {
  const std::string dir = ::testing::TempDir();
  const std::string text = dir + "not_idx.bin", truncated = dir + "truncated.idx";
  std::ofstream(text) << "hello, this is not an IDX file";
  {
    std::ofstream t(truncated, std::ios::binary);
    const unsigned char header[] = {0, 0, 8, 1, 0, 0, 0, 100};  // promises 100 bytes
    t.write(reinterpret_cast<const char*>(header), sizeof header);
    t << "only a few";
  }
  auto expect = [](const std::vector<std::string>& files, accel_status st,
                   const std::string& part) {
    std::vector<const char*> p;
    for (const auto& f : files) p.push_back(f.c_str());
    accel_dataset* d = nullptr;
    EXPECT_EQ(accel_dataset_from_idx(p.data(), p.size(), &d), st) << accel_last_error_message();
    EXPECT_NE(std::string(accel_last_error_message()).find(part), std::string::npos)
        << accel_last_error_message();
    EXPECT_EQ(d, nullptr);
  };
  expect({text}, ACCEL_ERR_IO, "not an IDX file");
  expect({text}, ACCEL_ERR_IO, text);
  expect({truncated}, ACCEL_ERR_IO, "truncated");
  expect({dir + "missing.idx"}, ACCEL_ERR_IO, "missing.idx");
  expect({kFashion + "t10k-images-idx3-ubyte.gz", kFashion + "train-labels-idx1-ubyte.gz"},
         ACCEL_ERR_SHAPE, "disagree");
}

TEST(Data, EpochsEndOnceAndAdvance) {
  accel_dataset* d = range_dataset(10);
  accel_dataloader* dl = loader(d, {{"batch_size", "3"}});
  int64_t rem = 0;
  OK(accel_dataloader_remainder(dl, &rem));
  EXPECT_EQ(rem, 1);
  bool end = true;
  std::vector<std::vector<int64_t>> seen;
  for (;;) {
    accel_tensor* f[1];
    size_t fields = 0;
    OK(accel_dataloader_next(dl, f, 1, &fields));
    if (fields == 0) break;
    OK(accel_dataloader_end_of_epoch(dl, &end));
    EXPECT_EQ(end, seen.size() == 3) << "true exactly while the last batch is in use";
    seen.emplace_back();
    accel_tensor_free(f[0]);
  }
  EXPECT_EQ(seen.size(), 4u) << "one process: the last batch [9] is short, not padded";
  int64_t epoch = -1;
  OK(accel_dataloader_epoch(dl, &epoch));
  EXPECT_EQ(epoch, 1);
  EXPECT_EQ(epoch_of(dl).back(), std::vector<int64_t>{9});
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

TEST(Data, ShuffleIsPerEpochAndPrefetchingChangesNothing) {
  accel_dataset* d = range_dataset(50);
  accel_dataloader* plain = loader(d, {{"batch_size", "4"}, {"shuffle", "true"}, {"seed", "9"}});
  accel_dataloader* fetched = loader(d, {{"batch_size", "4"},
                                         {"shuffle", "true"},
                                         {"seed", "9"},
                                         {"num_workers", "3"},
                                         {"prefetch_factor", "2"}});
  const auto e0 = epoch_of(plain), e1 = epoch_of(plain);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(epoch_of(fetched), e0);
  EXPECT_EQ(epoch_of(fetched), e1);
  std::set<int64_t> all;
  for (const auto& b : e0) all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 50u);
  OK(accel_dataloader_set_epoch(plain, 0));
  EXPECT_EQ(epoch_of(plain), e0) << "set_epoch replays the epoch's shuffle";
  accel_dataloader_free(plain);
  accel_dataloader_free(fetched);
  accel_dataset_free(d);
}

TEST(Data, ResumeFromPositionOrSkippedBatches) {
  accel_dataset* d = range_dataset(23);
  accel_dataloader* a = loader(d, {{"batch_size", "4"}, {"shuffle", "1"}, {"seed", "3"}});
  const auto full = epoch_of(a);  // epoch 0
  OK(accel_dataloader_set_epoch(a, 0));
  accel_tensor* f[1];
  size_t fields = 0;
  for (int i = 0; i < 2; ++i) {
    OK(accel_dataloader_next(a, f, 1, &fields));
    accel_tensor_free(f[0]);
  }
  int64_t epoch = -1, samples = -1;
  OK(accel_dataloader_position(a, &epoch, &samples));
  EXPECT_EQ(epoch, 0);
  EXPECT_EQ(samples, 8);
  accel_dataloader* b = loader(d, {{"batch_size", "4"}, {"shuffle", "1"}, {"seed", "3"}});
  OK(accel_dataloader_set_position(b, epoch, samples));
  EXPECT_EQ(epoch_of(b), decltype(full)(full.begin() + 2, full.end()));
  accel_dataloader* c = loader(d, {{"batch_size", "4"}, {"shuffle", "1"}, {"seed", "3"}});
  OK(accel_dataloader_skip_first_batches(c, 2));
  EXPECT_EQ(epoch_of(c), decltype(full)(full.begin() + 2, full.end()));
  EXPECT_EQ(accel_dataloader_set_position(c, 0, 24), ACCEL_ERR_INVALID_ARGUMENT);
  for (auto* l : {a, b, c}) accel_dataloader_free(l);
  accel_dataset_free(d);
}

namespace {
struct Counter {
  std::atomic<int> calls{0};
  int64_t fail_at = -1;
};
int32_t fill(int64_t index, void* const* buffers, const size_t* sizes, size_t count, void* user) {
  auto* c = static_cast<Counter*>(user);
  ++c->calls;
  if (index == c->fail_at) return 7;
  if (count != 2 || sizes[0] != 3 * sizeof(float) || sizes[1] != sizeof(int64_t)) return 99;
  auto* x = static_cast<float*>(buffers[0]);
  for (int i = 0; i < 3; ++i) x[i] = static_cast<float>(index * 10 + i);
  *static_cast<int64_t*>(buffers[1]) = index;
  return 0;
}
}  // namespace

TEST(Data, CallbackDatasetFillsBatchesAndReportsFailure) {
  Counter counter;
  const accel_dtype dtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_I64};
  const size_t dim_counts[] = {1, 0};
  const int64_t dims[] = {3};  // field 0: [3] per sample; field 1: a scalar
  accel_dataset* d = nullptr;
  OK(accel_dataset_from_callback(10, 2, dtypes, dim_counts, dims, fill, &counter, nullptr, &d));
  for (const char* workers : {"0", "2"}) {
    counter.fail_at = 5;  // in the second batch
    accel_dataloader* dl = loader(d, {{"batch_size", "4"}, {"num_workers", workers}});
    accel_tensor* f[2];
    size_t fields = 0;
    OK(accel_dataloader_next(dl, f, 2, &fields));
    const auto x = values_of<float>(f[0]);
    ASSERT_EQ(x.size(), 12u);
    EXPECT_EQ(x[5], 12.0f);  // sample 1, element 2
    auto y = values_of<int64_t>(f[1]);
    ASSERT_EQ(y.size(), 4u);
    EXPECT_EQ(y[3], 3);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
    EXPECT_EQ(accel_dataloader_next(dl, f, 2, &fields), ACCEL_ERR_CALLBACK) << workers;
    EXPECT_NE(std::string(accel_last_error_message()).find("returned 7 for index 5"),
              std::string::npos)
        << accel_last_error_message();
    counter.fail_at = -1;
    OK(accel_dataloader_next(dl, f, 2, &fields));  // the epoch starts again
    y = values_of<int64_t>(f[1]);
    EXPECT_EQ(y[0], 0);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
    accel_dataloader_free(dl);
  }
  accel_dataset_free(d);
}

TEST(Data, BadInputIsAStatus) {
  accel_dataset* d = range_dataset(10);
  accel_dataloader* dl = loader(d, {});
  EXPECT_EQ(accel_dataloader_set(dl, "batch_size", "0"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("batch_size"), std::string::npos);
  EXPECT_EQ(accel_dataloader_set(dl, "bacth_size", "4"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("known: batch_size"), std::string::npos);
  EXPECT_EQ(accel_dataloader_set(dl, "shuffle", "sometimes"), ACCEL_ERR_INVALID_ARGUMENT);
  accel_tensor* f[1] = {nullptr};
  size_t fields = 0;
  EXPECT_EQ(accel_dataloader_next(dl, f, 0, &fields), ACCEL_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(fields, 1u) << "the number of fields needed";
  int64_t epoch = -1, samples = -1;
  OK(accel_dataloader_position(dl, &epoch, &samples));
  EXPECT_EQ(samples, 0) << "a refused call takes no batch";
  OK(accel_dataloader_close(dl));
  OK(accel_dataloader_close(dl));
  EXPECT_EQ(accel_dataloader_next(dl, f, 1, &fields), ACCEL_ERR_STATE);
  EXPECT_NE(std::string(accel_last_error_message()).find("closed"), std::string::npos);
  int64_t len;
  EXPECT_EQ(accel_dataloader_batch_count(dl, &len), ACCEL_ERR_STATE);
  accel_dataloader_free(dl);
  // Tensors whose first dimensions disagree.
  float a[4] = {0}, b[3] = {0};
  const int64_t sa[] = {4}, sb[] = {3};
  accel_tensor *ta, *tb;
  OK(accel_tensor_from_data(a, sizeof a, ACCEL_DTYPE_F32, sa, 1, &ta));
  OK(accel_tensor_from_data(b, sizeof b, ACCEL_DTYPE_F32, sb, 1, &tb));
  const accel_tensor* both[] = {ta, tb};
  accel_dataset* bad = nullptr;
  EXPECT_EQ(accel_dataset_from_tensors(both, 2, &bad), ACCEL_ERR_SHAPE);
  EXPECT_NE(std::string(accel_last_error_message()).find("first dimension"), std::string::npos);
  accel_tensor_free(ta);
  accel_tensor_free(tb);
  accel_dataset_free(d);
}

TEST(Data, GatherForMetricsAloneDropsNothingReal) {
  accel_dataset* d = range_dataset(10);
  accel_dataloader* dl = loader(d, {{"batch_size", "4"}});
  int64_t total = 0;
  for (;;) {
    accel_tensor* f[1];
    size_t fields = 0;
    OK(accel_dataloader_next(dl, f, 1, &fields));
    if (fields == 0) break;
    accel_tensor* g = nullptr;
    OK(accel_gather_for_metrics(g_acc, f[0], &g));
    int64_t n = 0;
    accel_tensor_element_count(g, &n);
    total += n;
    accel_tensor_free(g);
    accel_tensor_free(f[0]);
  }
  EXPECT_EQ(total, 10);
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}

// join_uneven_inputs sets even_batches on the prepared dataloaders: one freed before is skipped,
// and one in the middle of an epoch goes on from where it was (world of one: join itself is off).
TEST(Data, JoinSkipsFreedLoadersAndKeepsAnIterationsPlace) {
  accel_dataset* d = range_dataset(10);
  accel_dataloader* gone = loader(d, {{"batch_size", "4"}});
  accel_dataloader* dl = loader(d, {{"batch_size", "4"}});
  void* objects[] = {gone, dl};
  OK(accel_prepare(g_acc, objects, 2));
  accel_dataloader_free(gone);
  accel_tensor* f[1];
  size_t n = 0;
  OK(accel_dataloader_next(dl, f, 1, &n));
  EXPECT_EQ(values_of<int64_t>(f[0]), (std::vector<int64_t>{0, 1, 2, 3}));
  accel_tensor_free(f[0]);
  OK(accel_join_uneven_inputs_begin(g_acc, 0));
  OK(accel_dataloader_next(dl, f, 1, &n));
  EXPECT_EQ(values_of<int64_t>(f[0]), (std::vector<int64_t>{4, 5, 6, 7}));
  accel_tensor_free(f[0]);
  EXPECT_EQ(accel_join_uneven_inputs_begin(g_acc, 0), ACCEL_ERR_STATE);
  OK(accel_join_uneven_inputs_end(g_acc));
  EXPECT_EQ(accel_join_uneven_inputs_end(g_acc), ACCEL_ERR_STATE);
  EXPECT_EQ(accel_join_uneven_inputs_begin(g_acc, 2), ACCEL_ERR_INVALID_ARGUMENT);
  accel_dataloader_free(dl);
  accel_dataset_free(d);
}
