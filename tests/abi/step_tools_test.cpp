// The helpers around the training step through the C interface, in one process:
// find_executable_batch_size, the profiler, no_sync, LocalSGD's single-process rules, the
// GradientAccumulationPlugin and DataLoaderConfiguration options, the per-process helpers.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "accelerator_env.hpp"

namespace {

accel_tensor* f32(std::vector<float> v, std::vector<int64_t> shape) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_from_data(v.data(), v.size() * 4, ACCEL_DTYPE_F32, shape.data(),
                                   shape.size(), &t),
            ACCEL_OK);
  return t;
}

struct Tries {
  std::vector<int64_t> sizes;
  int64_t fits = 8;  // sizes above run out of memory
};

accel_status fake_out_of_memory(void* data, int64_t size) {
  auto* t = static_cast<Tries*>(data);
  t->sizes.push_back(size);
  return size > t->fits ? ACCEL_ERR_OUT_OF_MEMORY : ACCEL_OK;
}

TEST(FindBatchSize, FakeOutOfMemoryAboveEightTriesAcceleratesSizes) {
  Tries tries;
  int64_t size = 0;
  OK(accel_find_executable_batch_size(g_acc, 128, fake_out_of_memory, &tries, &size));
  EXPECT_EQ(size, 8);
  // accelerate/tests/test_memory_utils.py's sequence.
  const std::vector<int64_t> expected = {128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36,
                                         32,  28,  25,  22, 19, 17, 15, 13, 11, 9,  8};
  EXPECT_EQ(tries.sizes, expected);
}

TEST(FindBatchSize, ReachingZeroIsAccelerateError) {
  Tries never;
  never.fits = 0;
  int64_t size = -1;
  EXPECT_EQ(accel_find_executable_batch_size(g_acc, 10, fake_out_of_memory, &never, &size),
            ACCEL_ERR_OUT_OF_MEMORY);
  EXPECT_NE(
      std::string(accel_last_error_message()).find("No executable batch size found, reached zero."),
      std::string::npos);
  EXPECT_EQ(never.sizes, (std::vector<int64_t>{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
  Tries none;
  EXPECT_EQ(accel_find_executable_batch_size(g_acc, 0, fake_out_of_memory, &none, &size),
            ACCEL_ERR_OUT_OF_MEMORY);
  EXPECT_TRUE(none.sizes.empty());
  EXPECT_EQ(accel_find_executable_batch_size(g_acc, -1, fake_out_of_memory, &none, &size),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_find_executable_batch_size(g_acc, 8, nullptr, &none, &size),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_find_executable_batch_size(nullptr, 8, fake_out_of_memory, &none, &size),
            ACCEL_ERR_INVALID_ARGUMENT);
}

accel_status fails_with_libaccels_error(void*, int64_t) {
  accel_tensor* t = nullptr;
  const int64_t shape[] = {3};
  float v[2] = {0, 0};
  return accel_tensor_from_data(v, sizeof v, ACCEL_DTYPE_F32, shape, 1, &t);  // 2 values, not 3
}

accel_status returns_nonsense(void*, int64_t) {
  return 12345;
}

TEST(FindBatchSize, AnotherFailureStopsTheSearchWithItsStatusAndMessage) {
  int64_t size = 0;
  const accel_status st =
      accel_find_executable_batch_size(g_acc, 64, fails_with_libaccels_error, nullptr, &size);
  EXPECT_NE(st, ACCEL_OK);
  EXPECT_NE(st, ACCEL_ERR_OUT_OF_MEMORY);
  const std::string message = accel_last_error_message();
  EXPECT_NE(message.find("at batch size 64"), std::string::npos) << message;
  EXPECT_EQ(accel_find_executable_batch_size(g_acc, 64, returns_nonsense, nullptr, &size),
            ACCEL_ERR_CALLBACK);
  EXPECT_NE(std::string(accel_last_error_message()).find("12345"), std::string::npos);
}

TEST(FindBatchSize, LibTorchsOutOfMemoryIsOutOfMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts the process on an allocation beyond its maximum "
                  "instead of failing it as the system allocator does";
#endif
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_define(m, "def big(self, x):\n    return torch.empty(1 << 46) + x.sum()\n"));
  accel_tensor* x = f32({1}, {1});
  const accel_tensor* in[] = {x};
  accel_tensor_list* out = nullptr;
  EXPECT_EQ(accel_model_call(m, "big", in, 1, &out), ACCEL_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(accel_last_error_message()).find("can't allocate memory"),
            std::string::npos)
      << accel_last_error_message();
  accel_tensor_free(x);
  accel_model_free(m);
}

// A try reads a batch, draws from LibTorch's generator and accumulates gradients; those above 8
// then run out of memory.
struct TrainingTries {
  accel_model* model;
  accel_dataloader* loader;
  std::vector<std::vector<float>> first_rows, noise;
  std::vector<double> norms;
};

accel_status training_try(void* data, int64_t size) {
  auto* t = static_cast<TrainingTries*>(data);
  accel_tensor* fields[2] = {nullptr, nullptr};
  size_t n = 0;
  if (accel_status st = accel_dataloader_next(t->loader, fields, 2, &n); st != ACCEL_OK) return st;
  const auto x = values_of<float>(fields[0]);
  t->first_rows.push_back({x.begin(), x.begin() + 4});
  accel_tensor* noise = call_one(t->model, "noise", {fields[0]});
  t->noise.push_back(values_of<float>(noise));
  accel_tensor* loss = call_one(t->model, "loss", {fields[0]});
  accel_status st = accel_backward(g_acc, loss);
  double norm = 0;
  if (st == ACCEL_OK) st = accel_clip_grad_norm(g_acc, t->model, 1e30, 2, &norm);
  t->norms.push_back(norm);
  for (accel_tensor* f : {fields[0], fields[1], noise, loss}) accel_tensor_free(f);
  if (st != ACCEL_OK) return st;
  return size > 8 ? ACCEL_ERR_OUT_OF_MEMORY : ACCEL_OK;
}

TEST(FindBatchSize, ARetryFindsRandomStateGradientsAndDataAsBefore) {
  init_with({});
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=4 out_features=1"));
  OK(accel_model_define(m,
                        "def loss(self, x):\n    return self.fc.forward(x).pow(2).sum()\n"
                        "def noise(self, x):\n    return torch.rand(3)\n"));
  std::vector<float> xs(64 * 4);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) - 3.0f;
  accel_tensor* x = f32(xs, {64, 4});
  std::vector<int64_t> ys(64, 1);
  accel_tensor* y = nullptr;
  const int64_t yshape[] = {64};
  OK(accel_tensor_from_data(ys.data(), ys.size() * 8, ACCEL_DTYPE_I64, yshape, 1, &y));
  const accel_tensor* fields[] = {x, y};
  accel_dataset* ds = nullptr;
  OK(accel_dataset_from_tensors(fields, 2, &ds));
  accel_dataloader* loader = nullptr;
  OK(accel_dataloader_new(g_acc, ds, &loader));
  OK(accel_dataloader_set(loader, "batch_size", "4"));
  OK(accel_dataloader_set(loader, "shuffle", "true"));
  void* objs[] = {m, loader};
  OK(accel_prepare(g_acc, objs, 2));
  TrainingTries tries{m, loader, {}, {}, {}};
  int64_t size = 0;
  OK(accel_find_executable_batch_size(g_acc, 10, training_try, &tries, &size));
  EXPECT_EQ(size, 8);
  ASSERT_EQ(tries.norms.size(), 3u);  // 10, 9, 8
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(tries.first_rows[i], tries.first_rows[0]) << "try " << i << " read another batch";
    EXPECT_EQ(tries.noise[i], tries.noise[0]) << "try " << i << " drew other random numbers";
    EXPECT_DOUBLE_EQ(tries.norms[i], tries.norms[0]) << "try " << i << " kept earlier gradients";
  }
  // What the successful try did stays: the next batch is the loader's second.
  accel_tensor* next[2] = {nullptr, nullptr};
  size_t n = 0;
  OK(accel_dataloader_next(loader, next, 2, &n));
  const auto second = values_of<float>(next[0]);
  EXPECT_NE(std::vector<float>(second.begin(), second.begin() + 4), tries.first_rows[0]);
  for (accel_tensor* t : {next[0], next[1], x, y}) accel_tensor_free(t);
  accel_dataloader_free(loader);
  accel_dataset_free(ds);
  accel_model_free(m);
}

int count_windows(void* data, accel_profiler*) {
  ++*static_cast<int*>(data);
  return ACCEL_OK;
}

accel_status refuse_window(void*, accel_profiler*) {
  return ACCEL_ERR_IO;
}

std::string temp_dir(const char* name) {
  const std::string dir = ::testing::TempDir() + name + "_" + std::to_string(getpid()) + "_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return dir;
}

void some_work(accel_model* m) {
  accel_tensor* x = f32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  accel_tensor* loss = call_one(m, "loss", {x});
  accel_tensor_free(loss);
  accel_tensor_free(x);
}

accel_model* linear_model() {
  accel_model* m = nullptr;
  EXPECT_EQ(accel_model_new(&m), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "fc", "linear", "in_features=4 out_features=3"), ACCEL_OK);
  EXPECT_EQ(accel_model_define(m, "def loss(self, x):\n    return self.fc.forward(x).sum()\n"),
            ACCEL_OK);
  return m;
}

TEST(Profiler, WritesEachRanksChromeTraceWithAtenEventsAndATable) {
  accel_model* m = linear_model();
  const std::string dir = temp_dir("trace");
  accel_profiler* p = nullptr;
  OK(accel_profiler_new(g_acc, &p));
  OK(accel_profiler_set(p, "activities", "cpu"));
  OK(accel_profiler_set(p, "record_shapes", "true"));
  OK(accel_profiler_set(p, "output_trace_dir", dir.c_str()));
  OK(accel_profiler_start(p));
  for (int i = 0; i < 3; ++i) {
    OK(accel_profiler_step(p));
    some_work(m);
  }
  OK(accel_profiler_stop(p));
  std::ifstream in(dir + "/profile_0.json");
  ASSERT_TRUE(in.good()) << "no " << dir << "/profile_0.json";
  const auto trace = nlohmann::json::parse(in);
  int aten = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["name"].get<std::string>().rfind("aten::", 0) == 0 && e["ph"] == "X") ++aten;
  EXPECT_GT(aten, 3);
  size_t size = 0;
  EXPECT_EQ(accel_profiler_table(p, nullptr, -1, nullptr, 0, &size), ACCEL_ERR_BUFFER_TOO_SMALL);
  std::string table(size, '\0');
  OK(accel_profiler_table(p, "self_cpu_time_total", -1, table.data(), table.size(), &size));
  EXPECT_NE(table.find("CPU time total:"), std::string::npos) << table;
  EXPECT_NE(table.find("aten::"), std::string::npos) << table;
  int64_t windows = 0;
  OK(accel_profiler_window_count(p, &windows));
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(accel_profiler_set(p, "with_stack", "true"), ACCEL_ERR_STATE);  // after start
  accel_profiler_free(p);
  accel_model_free(m);
}

TEST(Profiler, ScheduleCallsTraceReadyAsTorchDoesAndWritesNothingWithoutADirectory) {
  accel_model* m = linear_model();
  int windows = 0;
  accel_profiler* p = nullptr;
  OK(accel_profiler_new(g_acc, &p));
  for (auto [k, v] : {std::pair{"wait", "1"}, {"warmup", "1"}, {"active", "2"}, {"repeat", "2"}})
    OK(accel_profiler_set(p, k, v));
  OK(accel_profiler_set_on_trace_ready(p, count_windows, &windows));
  // In an empty working directory: without output_trace_dir nothing may appear there.
  const std::string dir = temp_dir("cwd");
  ASSERT_EQ(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()), 0);
  char previous[4096];
  ASSERT_NE(getcwd(previous, sizeof previous), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  OK(accel_profiler_start(p));
  for (int i = 0; i < 20; ++i) {
    OK(accel_profiler_step(p));
    some_work(m);
  }
  OK(accel_profiler_stop(p));
  ASSERT_EQ(chdir(previous), 0);
  EXPECT_EQ(windows, 2);  // min(20 / 4, repeat 2)
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (const dirent* e = readdir(d)) entries += e->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(entries, 0) << "the profiler wrote into " << dir;
  accel_profiler_free(p);
  accel_model_free(m);
}

TEST(Profiler, BadUseIsAClearError) {
  accel_profiler* p = nullptr;
  OK(accel_profiler_new(g_acc, &p));
  EXPECT_EQ(accel_profiler_set(p, "activities", "tpu"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_profiler_set(p, "wait", "-1"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_profiler_set(p, "schedule", "1"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_profiler_step(p), ACCEL_ERR_STATE);  // not started
  OK(accel_profiler_set(p, "active", "1"));
  OK(accel_profiler_set_on_trace_ready(p, refuse_window, nullptr));
  OK(accel_profiler_start(p));
  accel_profiler* second = nullptr;
  OK(accel_profiler_new(g_acc, &second));
  EXPECT_EQ(accel_profiler_start(second), ACCEL_ERR_STATE);  // LibTorch's is on in this thread
  accel_profiler_free(second);
  accel_status from_thread = ACCEL_OK;
  std::thread([&] { from_thread = accel_profiler_step(p); }).join();
  EXPECT_EQ(from_thread, ACCEL_ERR_STATE);
  EXPECT_EQ(accel_profiler_step(p), ACCEL_ERR_CALLBACK);  // the window of step 0 is complete
  // The next window was started all the same: the next step completes it and reports again.
  EXPECT_EQ(accel_profiler_step(p), ACCEL_ERR_CALLBACK);
  int64_t windows = 0;
  OK(accel_profiler_window_count(p, &windows));
  EXPECT_EQ(windows, 2);
  OK(accel_profiler_set_on_trace_ready(p, nullptr, nullptr));
  OK(accel_profiler_step(p));
  accel_profiler_free(p);  // running: stopped without a trace
  accel_profiler_free(nullptr);
  EXPECT_EQ(accel_profiler_start(nullptr), ACCEL_ERR_INVALID_ARGUMENT);
}

TEST(NoSync, PairsNestAndAnEndWithoutBeginIsAnError) {
  accel_model* m = linear_model();
  OK(accel_no_sync_begin(g_acc, m));
  OK(accel_no_sync_begin(g_acc, m));
  OK(accel_no_sync_end(g_acc, m));
  OK(accel_no_sync_end(g_acc, m));
  EXPECT_EQ(accel_no_sync_end(g_acc, m), ACCEL_ERR_STATE);
  EXPECT_EQ(accel_no_sync_begin(g_acc, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  accel_model_free(m);
}

TEST(LocalSgd, OneProcessCountsStepsAndAveragesNothing) {
  accel_model* m = linear_model();
  accel_local_sgd* l = nullptr;
  EXPECT_EQ(accel_local_sgd_begin(g_acc, m, 0, &l), ACCEL_ERR_INVALID_ARGUMENT);
  OK(accel_local_sgd_begin(g_acc, m, 4, &l));
  EXPECT_EQ(accel_local_sgd_set(l, "outer_optimizer", "adam"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_local_sgd_set(l, "outer_lr", "x"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_local_sgd_set(l, "inner_lr", "1"), ACCEL_ERR_INVALID_ARGUMENT);
  OK(accel_local_sgd_set(l, "outer_optimizer", "nesterov"));
  for (int i = 0; i < 9; ++i) OK(accel_local_sgd_step(l));
  EXPECT_EQ(accel_local_sgd_set(l, "outer_lr", "1"), ACCEL_ERR_STATE);
  OK(accel_local_sgd_end(l));
  OK(accel_local_sgd_end(l));  // a second end does nothing
  int64_t averages = -1;
  OK(accel_local_sgd_average_count(l, &averages));
  EXPECT_EQ(averages, 0);
  EXPECT_EQ(accel_local_sgd_step(l), ACCEL_ERR_STATE);
  accel_local_sgd_free(l);
  EXPECT_EQ(accel_no_sync_end(g_acc, m), ACCEL_ERR_STATE);  // end closed LocalSGD's no_sync
  OK(accel_local_sgd_begin(g_acc, m, 2, &l));
  accel_local_sgd_free(l);  // freed unended: no_sync closed too
  EXPECT_EQ(accel_no_sync_end(g_acc, m), ACCEL_ERR_STATE);
  accel_model_free(m);
}

TEST(PerProcess, TheOnlyProcessIsLastAndLocalMainFirstPasses) {
  bool last = false;
  OK(accel_is_last_process(g_acc, &last));
  EXPECT_TRUE(last);
  OK(accel_local_main_process_first_begin(g_acc));
  OK(accel_local_main_process_first_end(g_acc));
}

// The order of a shuffled epoch, as the first value of each batch.
std::vector<float> epoch_order(accel_dataloader* loader) {
  std::vector<float> firsts;
  for (;;) {
    accel_tensor* f = nullptr;
    size_t n = 0;
    if (accel_dataloader_next(loader, &f, 1, &n) != ACCEL_OK || n == 0) break;
    firsts.push_back(values_of<float>(f)[0]);
    accel_tensor_free(f);
  }
  return firsts;
}

std::vector<float> order_with(std::initializer_list<std::pair<const char*, const char*>> settings,
                              const char* loader_seed) {
  init_with(settings);
  std::vector<float> v(32);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  accel_tensor* t = f32(v, {32});
  const accel_tensor* fields[] = {t};
  accel_dataset* ds = nullptr;
  EXPECT_EQ(accel_dataset_from_tensors(fields, 1, &ds), ACCEL_OK);
  accel_dataloader* l = nullptr;
  EXPECT_EQ(accel_dataloader_new(g_acc, ds, &l), ACCEL_OK);
  EXPECT_EQ(accel_dataloader_set(l, "shuffle", "true"), ACCEL_OK);
  if (loader_seed) {
    EXPECT_EQ(accel_dataloader_set(l, "seed", loader_seed), ACCEL_OK);
  }
  auto order = epoch_order(l);
  accel_dataloader_free(l);
  accel_dataset_free(ds);
  accel_tensor_free(t);
  return order;
}

TEST(DataLoaderConfiguration, DataSeedIsEveryLoadersDefaultSeed) {
  const auto seeded = order_with({{"data_seed", "5"}}, nullptr);
  EXPECT_EQ(seeded, order_with({}, "5"));
  EXPECT_NE(seeded, order_with({}, nullptr));
  EXPECT_EQ(order_with({{"data_seed", "5"}}, "7"), order_with({}, "7"));  // the loader's wins
  EXPECT_EQ(order_with({{"use_seedable_sampler", "false"}}, nullptr), order_with({}, nullptr));
  accel_config* c = nullptr;
  OK(accel_config_new(&c));
  EXPECT_EQ(accel_config_set(c, "data_seed", "-2"), ACCEL_ERR_CONFIG);
  for (const char* key : {"sync_each_batch", "sync_with_dataloader", "adjust_scheduler"})
    EXPECT_EQ(accel_config_set(c, key, "maybe"), ACCEL_ERR_CONFIG) << key;
  accel_config_free(c);
  init_with({});
}

// The learning rates one_cycle sets over 8 micro-steps with 2 per optimizer step.
std::vector<double> one_cycle_rates(const char* adjust) {
  init_with({{"gradient_accumulation_steps", "2"}, {"adjust_scheduler", adjust}});
  accel_model* m = linear_model();
  accel_optimizer* o = nullptr;
  EXPECT_EQ(accel_optimizer_new(m, "sgd", &o), ACCEL_OK);
  accel_scheduler* s = nullptr;
  EXPECT_EQ(accel_scheduler_new(o, "one_cycle", &s), ACCEL_OK);
  EXPECT_EQ(accel_scheduler_set(s, "max_lr", "1.0"), ACCEL_OK);
  EXPECT_EQ(accel_scheduler_set(s, "total_steps", "4"), ACCEL_OK);
  void* objs[] = {m, o, s};
  EXPECT_EQ(accel_prepare(g_acc, objs, 3), ACCEL_OK) << accel_last_error_message();
  std::vector<double> rates;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(accel_accumulate(g_acc), ACCEL_OK);
    EXPECT_EQ(accel_optimizer_step(o), ACCEL_OK);
    EXPECT_EQ(accel_scheduler_step(s), ACCEL_OK) << accel_last_error_message();
    double lr = 0;
    EXPECT_EQ(accel_scheduler_lr(s, &lr), ACCEL_OK);
    rates.push_back(lr);
  }
  accel_scheduler_free(s);
  accel_optimizer_free(o);
  accel_model_free(m);
  return rates;
}

TEST(GradientAccumulationPlugin, AdjustSchedulerChangesNothingAsInAccelerate) {
  // Accelerate 1.15.0 with GradientAccumulationPlugin(num_steps=2, adjust_scheduler=True or
  // False), OneCycleLR(max_lr=1, total_steps=4), 8 micro-steps: get_last_lr() after each (its
  // to_kwargs drops adjust_scheduler's default, which GradientState then reads as False).
  const std::vector<double> accelerate = {0.040000000000000036,
                                          0.811745653949763,
                                          0.811745653949763,
                                          0.28306099820869923,
                                          0.28306099820869923,
                                          4e-06,
                                          4e-06,
                                          0.2830609982086991};
  for (const char* adjust : {"true", "false"}) {
    const auto rates = one_cycle_rates(adjust);
    ASSERT_EQ(rates.size(), accelerate.size());
    for (size_t i = 0; i < rates.size(); ++i)
      EXPECT_NEAR(rates[i], accelerate[i], 1e-9) << "adjust_scheduler " << adjust << ", " << i;
  }
  init_with({});
}

// Which of 6 batches synchronise, with 4 micro-steps per optimizer step.
std::vector<bool> sync_pattern(const char* with_dataloader) {
  init_with({{"gradient_accumulation_steps", "4"}, {"sync_with_dataloader", with_dataloader}});
  std::vector<float> v(6, 1.0f);
  accel_tensor* t = f32(v, {6});
  const accel_tensor* fields[] = {t};
  accel_dataset* ds = nullptr;
  EXPECT_EQ(accel_dataset_from_tensors(fields, 1, &ds), ACCEL_OK);
  accel_dataloader* l = nullptr;
  EXPECT_EQ(accel_dataloader_new(g_acc, ds, &l), ACCEL_OK);
  void* objs[] = {l};
  EXPECT_EQ(accel_prepare(g_acc, objs, 1), ACCEL_OK);
  std::vector<bool> syncs;
  for (;;) {
    accel_tensor* f = nullptr;
    size_t n = 0;
    if (accel_dataloader_next(l, &f, 1, &n) != ACCEL_OK || n == 0) break;
    EXPECT_EQ(accel_accumulate(g_acc), ACCEL_OK);
    bool sync = false;
    EXPECT_EQ(accel_sync_gradients(g_acc, &sync), ACCEL_OK);
    syncs.push_back(sync);
    accel_tensor_free(f);
  }
  accel_dataloader_free(l);
  accel_dataset_free(ds);
  accel_tensor_free(t);
  return syncs;
}

TEST(GradientAccumulationPlugin, SyncWithDataloaderMakesTheLastBatchASyncStep) {
  EXPECT_EQ(sync_pattern("true"), (std::vector<bool>{false, false, false, true, false, true}));
  EXPECT_EQ(sync_pattern("false"), (std::vector<bool>{false, false, false, true, false, false}));
  init_with({});
}

}  // namespace
