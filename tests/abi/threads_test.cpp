// What a binding relies on when its handles die on other threads and its closures run on the
// library's threads (accel.h, "Threads" and "Callbacks"): a sample callback is never entered once
// its dataloader is freed or closed, free waits only for callbacks already running, release
// callbacks run once after the last use, and calls into one training family from many threads are
// serialised. Built to run under ThreadSanitizer too (tools/sanitize.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accel/accel.h"
#include "accelerator_env.hpp"

using namespace std::chrono_literals;

namespace {

// A callback dataset's closure state, as a binding would keep it.
struct Probe {
  std::atomic<int> entered{0};  // callbacks started
  std::atomic<int> inside{0};   // callbacks running now
  std::atomic<int> released{0};
  // While closed, callbacks for samples from `gated_from` on wait in it: the test then knows they
  // are running.
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool gate_closed = false;
  int64_t gated_from = INT64_MAX;
  accel_dataloader* loader = nullptr;   // for the re-entry test
  std::atomic<int> reentry_status{-1};  // what a call back into the library returned
  // 0 none, 1 into its dataloader, 2 into a family, 3 free its dataloader, 4 use and free another
  int reentry = 0;
  accel_optimizer* optimizer = nullptr;
  std::atomic<accel_dataloader*> other{nullptr};
};

int32_t fill(int64_t index, void* const* buffers, const size_t* sizes, size_t count, void* user) {
  auto* p = static_cast<Probe*>(user);
  ++p->entered;
  ++p->inside;
  if (index >= p->gated_from) {
    std::unique_lock<std::mutex> lock(p->gate_mutex);
    p->gate_cv.wait(lock, [&] { return !p->gate_closed; });
  }
  if (count != 1 || sizes[0] != sizeof(float)) return 99;
  *static_cast<float*>(buffers[0]) = static_cast<float>(index);
  if (p->reentry == 1) {
    int64_t n = 0;
    p->reentry_status = accel_dataloader_batch_count(p->loader, &n);
  } else if (p->reentry == 2) {
    double lr = 0;
    p->reentry_status = accel_optimizer_lr(p->optimizer, &lr);
  } else if (p->reentry == 3) {
    accel_dataloader_free(p->loader);  // refused: it would wait for this very callback
    p->reentry_status = accel_last_error_status();
  } else if (p->reentry == 4) {
    // A garbage collector's finalizer may run inside a callback and free another loader.
    if (accel_dataloader* other = p->other.exchange(nullptr)) {
      int64_t n = 0;
      p->reentry_status = accel_dataloader_batch_count(other, &n);
      accel_dataloader_free(other);
    }
  }
  // Tensors are fine to use from a callback.
  accel_tensor* t = nullptr;
  const float one = 1;
  if (accel_tensor_from_data(&one, sizeof one, ACCEL_DTYPE_F32, nullptr, 0, &t) != ACCEL_OK)
    return 98;
  accel_tensor_free(t);
  --p->inside;
  return 0;
}

void release(void* user) {
  ++static_cast<Probe*>(user)->released;
}

accel_dataset* callback_dataset(Probe* p, int64_t samples) {
  const accel_dtype dtype = ACCEL_DTYPE_F32;
  const size_t dim_counts[] = {0};
  accel_dataset* d = nullptr;
  EXPECT_EQ(
      accel_dataset_from_callback(samples, 1, &dtype, dim_counts, nullptr, fill, p, release, &d),
      ACCEL_OK)
      << accel_last_error_message();
  return d;
}

accel_dataloader* prefetching_loader(accel_dataset* d, const char* workers) {
  accel_dataloader* dl = nullptr;
  EXPECT_EQ(accel_dataloader_new(g_acc, d, &dl), ACCEL_OK);
  EXPECT_EQ(accel_dataloader_set(dl, "batch_size", "8"), ACCEL_OK);
  EXPECT_EQ(accel_dataloader_set(dl, "num_workers", workers), ACCEL_OK);
  // A deep window: the workers keep producing (and entering callbacks) for a long time.
  EXPECT_EQ(accel_dataloader_set(dl, "prefetch_factor", "64"), ACCEL_OK);
  return dl;
}

void take_batches(accel_dataloader* dl, int n) {
  for (int i = 0; i < n; ++i) {
    accel_tensor* f[1];
    size_t fields = 0;
    ASSERT_EQ(accel_dataloader_next(dl, f, 1, &fields), ACCEL_OK) << accel_last_error_message();
    ASSERT_EQ(fields, 1u);
    accel_tensor_free(f[0]);
  }
}

// Stops `dl` with `stop` (free or close) while each of its `workers` is inside a callback, and
// checks the promise: stop waits for the callbacks already running (and only for them: no worker
// starts another sample), and once it has returned no callback is running and none is ever
// entered again.
void expect_stop_ends_callbacks(Probe& p, accel_dataloader* dl, int workers,
                                const std::function<void()>& stop) {
  {
    std::lock_guard<std::mutex> lock(p.gate_mutex);
    p.gate_closed = true;
    p.gated_from = 16;  // batches of 8, in order: the first two pass, every later one waits
  }
  take_batches(dl, 2);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (p.inside.load() < workers && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(p.inside.load(), workers) << "every worker is inside a callback";
  const int before = p.entered.load();
  std::atomic<bool> returned{false};
  int inside_at_return = -1, entered_at_return = -1;
  std::thread stopper([&] {
    stop();
    inside_at_return = p.inside.load();
    entered_at_return = p.entered.load();
    returned = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(returned.load()) << "stop returned while callbacks were still running";
  {
    std::lock_guard<std::mutex> lock(p.gate_mutex);
    p.gate_closed = false;
  }
  p.gate_cv.notify_all();
  stopper.join();
  EXPECT_EQ(inside_at_return, 0) << "stop returned while a callback was still running";
  EXPECT_LE(entered_at_return - before, 0) << "a worker started another sample after stop";
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(p.entered.load(), entered_at_return) << "a callback was entered after stop returned";
}

}  // namespace

TEST(Lifetimes, FreeingAPreparedLoaderMidEpochStopsItsCallbacks) {
  Probe p;
  accel_dataset* d = callback_dataset(&p, 4000);
  accel_dataloader* dl = prefetching_loader(d, "3");
  void* objs[] = {dl};
  OK(accel_prepare(g_acc, objs, 1));  // the accelerator holds the loader too
  expect_stop_ends_callbacks(p, dl, 3, [&] { accel_dataloader_free(dl); });
  EXPECT_EQ(p.released.load(), 0) << "the dataset handle is still alive";
  accel_dataset_free(d);
  EXPECT_EQ(p.released.load(), 1) << "released once the dataset and its loaders are gone";
  // The accelerator keeps the freed loader's cursor in its checkpoints.
  const std::string dir = ::testing::TempDir() + "freed_loader_state";
  std::system(("rm -rf " + dir).c_str());
  const int entered = p.entered.load();
  OK(accel_save_state(g_acc, dir.c_str()));
  OK(accel_load_state(g_acc, dir.c_str()));
  EXPECT_EQ(p.entered.load(), entered);
  init_with({});
}

TEST(Lifetimes, ClosingAPreparedLoaderMidEpochStopsItsCallbacks) {
  Probe p;
  accel_dataset* d = callback_dataset(&p, 4000);
  accel_dataloader* dl = prefetching_loader(d, "3");
  void* objs[] = {dl};
  OK(accel_prepare(g_acc, objs, 1));
  expect_stop_ends_callbacks(p, dl, 3, [&] { EXPECT_EQ(accel_dataloader_close(dl), ACCEL_OK); });
  accel_tensor* f[1];
  size_t fields = 0;
  EXPECT_EQ(accel_dataloader_next(dl, f, 1, &fields), ACCEL_ERR_STATE);
  accel_dataset_free(d);
  EXPECT_EQ(p.released.load(), 1) << "a closed loader no longer holds the dataset";
  accel_dataloader_free(dl);
  EXPECT_EQ(p.released.load(), 1);
  init_with({});
}

TEST(Lifetimes, FreeOnAnotherThreadLikeAFinalizer) {
  Probe p;
  accel_dataset* d = callback_dataset(&p, 4000);
  accel_dataloader* dl = prefetching_loader(d, "2");
  accel_dataset_free(d);  // the loader keeps the dataset
  expect_stop_ends_callbacks(p, dl, 2, [&] { accel_dataloader_free(dl); });
  EXPECT_EQ(p.released.load(), 1) << "released by the loader's free, on that thread";
}

TEST(Lifetimes, ReleaseRunsOnceAfterTheLastUser) {
  Probe p;
  accel_dataset* d = callback_dataset(&p, 10);
  accel_dataloader* a = prefetching_loader(d, "0");
  accel_dataloader* b = prefetching_loader(d, "1");
  take_batches(a, 1);
  take_batches(b, 1);
  accel_dataset_free(d);
  EXPECT_EQ(p.released.load(), 0);
  take_batches(a, 1);  // still usable through the loaders
  accel_dataloader_free(a);
  EXPECT_EQ(p.released.load(), 0);
  OK(accel_dataloader_close(b));
  EXPECT_EQ(p.released.load(), 1);
  accel_dataloader_free(b);
  EXPECT_EQ(p.released.load(), 1);
  // A refused dataset never calls release.
  Probe q;
  const accel_dtype bad = 42;
  const size_t dims[] = {0};
  accel_dataset* none = nullptr;
  EXPECT_EQ(accel_dataset_from_callback(10, 1, &bad, dims, nullptr, fill, &q, release, &none),
            ACCEL_ERR_DTYPE);
  EXPECT_EQ(q.released.load(), 0);
}

TEST(Lifetimes, ACallbackMayNotCallIntoItsLoaderOrAFamily) {
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=1 out_features=1"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  for (int reentry : {1, 2, 3}) {
    for (const char* workers : {"0", "2"}) {
      SCOPED_TRACE(std::to_string(reentry) + " workers " + workers);
      Probe p;
      p.reentry = reentry;
      p.optimizer = o;
      accel_dataset* d = callback_dataset(&p, 16);
      accel_dataloader* dl = prefetching_loader(d, workers);
      p.loader = dl;
      take_batches(dl, 1);
      EXPECT_EQ(p.reentry_status.load(), ACCEL_ERR_STATE)
          << "a call that could wait for the callback itself is refused, not a deadlock";
      take_batches(dl, 1);  // the loader survived the refused free
      accel_dataloader_free(dl);
      accel_dataset_free(d);
      EXPECT_EQ(p.released.load(), 1);
    }
  }
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST(Lifetimes, ACallbackMayUseAndFreeOtherLoaders) {
  for (const char* workers : {"0", "2"}) {
    SCOPED_TRACE(workers);
    Probe p, q;
    p.reentry = 4;
    accel_dataset* d = callback_dataset(&p, 16);
    accel_dataset* e = callback_dataset(&q, 16);
    accel_dataloader* dl = prefetching_loader(d, workers);
    accel_dataloader* other = prefetching_loader(e, "1");
    take_batches(other, 1);  // its worker is running too
    p.other = other;
    take_batches(dl, 1);
    EXPECT_EQ(p.reentry_status.load(), ACCEL_OK);
    EXPECT_EQ(p.other.load(), nullptr) << "the other loader was freed from the callback";
    accel_dataset_free(e);
    // The callback took the loader before freeing it, so its free (which waits for the other
    // loader's worker) may still run on dl's worker thread: the release comes when it returns.
    for (int i = 0; i < 500 && q.released.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(q.released.load(), 1);
    accel_dataloader_free(dl);
    accel_dataset_free(d);
  }
}

namespace {

// A model, optimizer and scheduler over it, and a fixed batch.
struct Trainer {
  accel_model* m = nullptr;
  accel_optimizer* o = nullptr;
  accel_scheduler* s = nullptr;
  accel_tensor* x = nullptr;
  explicit Trainer(uint64_t seed) {
    EXPECT_EQ(accel_set_seed(g_acc, seed, false), ACCEL_OK);
    EXPECT_EQ(accel_model_new(&m), ACCEL_OK);
    EXPECT_EQ(accel_model_add_layer(m, "fc", "linear", "in_features=16 out_features=4"), ACCEL_OK);
    EXPECT_EQ(
        accel_model_define(m, "def loss(self, x):\n    return self.fc.forward(x).pow(2).mean()\n"),
        ACCEL_OK);
    EXPECT_EQ(accel_optimizer_new(m, "adam", &o), ACCEL_OK);
    EXPECT_EQ(accel_scheduler_new(o, "exponential", &s), ACCEL_OK);
    EXPECT_EQ(accel_scheduler_set(s, "gamma", "0.99"), ACCEL_OK);
    std::vector<float> v(8 * 16);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
    const int64_t shape[] = {8, 16};
    EXPECT_EQ(accel_tensor_from_data(v.data(), v.size() * 4, ACCEL_DTYPE_F32, shape, 2, &x),
              ACCEL_OK);
  }
  ~Trainer() {
    accel_tensor_free(x);
    accel_scheduler_free(s);
    accel_optimizer_free(o);
    accel_model_free(m);
  }
  // One training step (accumulate only for a prepared model).
  void step(bool prepared) {
    if (prepared) {
      ASSERT_EQ(accel_accumulate(g_acc), ACCEL_OK) << accel_last_error_message();
    }
    accel_tensor* loss = call_one(m, "loss", {x});
    ASSERT_NE(loss, nullptr);
    ASSERT_EQ(accel_backward(g_acc, loss), ACCEL_OK) << accel_last_error_message();
    ASSERT_EQ(accel_optimizer_step(o), ACCEL_OK) << accel_last_error_message();
    ASSERT_EQ(accel_scheduler_step(s), ACCEL_OK) << accel_last_error_message();
    ASSERT_EQ(accel_optimizer_zero_grad(o), ACCEL_OK);
    accel_tensor_free(loss);
  }
  std::vector<float> weights() const {
    accel_tensor* t = nullptr;
    EXPECT_EQ(accel_model_tensor(m, "fc.weight", &t), ACCEL_OK);
    auto v = values_of<float>(t);
    accel_tensor_free(t);
    return v;
  }
};

}  // namespace

TEST(Threads, OneFamilyFromManyThreads) {
  // Sequentially first, for the reference weights.
  std::vector<float> reference;
  {
    init_with({});
    Trainer t(5);
    void* objs[] = {t.m, t.o, t.s};
    OK(accel_prepare(g_acc, objs, 3));
    for (int i = 0; i < 30; ++i) t.step(true);
    reference = t.weights();
  }
  init_with({});
  Trainer t(5);
  void* objs[] = {t.m, t.o, t.s};
  OK(accel_prepare(g_acc, objs, 3));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  // Readers of every member of the family, and collectives, while one thread trains.
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r)
    readers.emplace_back([&, r] {
      while (!done) {
        double lr = 0;
        bool sync = false;
        accel_tensor* w = nullptr;
        accel_tensor* g = nullptr;
        failures += accel_optimizer_lr(t.o, &lr) != ACCEL_OK;
        failures += accel_scheduler_lr(t.s, &lr) != ACCEL_OK;
        failures += accel_sync_gradients(g_acc, &sync) != ACCEL_OK;
        failures += accel_model_tensor(t.m, "fc.bias", &w) != ACCEL_OK;
        if (r == 0) failures += accel_gather(g_acc, w, &g) != ACCEL_OK;
        accel_tensor_free(g);
        accel_tensor_free(w);
      }
    });
  std::thread trainer([&] {
    for (int i = 0; i < 30; ++i) t.step(true);
  });
  trainer.join();
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(t.weights(), reference) << "readers on other threads changed nothing";
}

TEST(Threads, SeparateFamiliesRunInParallel) {
  // Two unprepared models, each trained on its own thread: the same weights as one after the
  // other (their calls share no lock and no state).
  std::vector<float> a_ref, b_ref;
  {
    Trainer a(1), b(2);
    for (int i = 0; i < 20; ++i) a.step(false);
    for (int i = 0; i < 20; ++i) b.step(false);
    a_ref = a.weights();
    b_ref = b.weights();
  }
  Trainer a(1), b(2);
  std::thread ta([&] {
    for (int i = 0; i < 20; ++i) a.step(false);
  });
  std::thread tb([&] {
    for (int i = 0; i < 20; ++i) b.step(false);
  });
  ta.join();
  tb.join();
  EXPECT_EQ(a.weights(), a_ref);
  EXPECT_EQ(b.weights(), b_ref);
}

TEST(Threads, PrepareWhileAnotherThreadUsesTheFamily) {
  init_with({});
  Trainer t(3);
  std::atomic<bool> prepared{false};
  std::atomic<int> failures{0};
  std::thread user([&] {
    // Before, during and after accel_prepare moves the family under the accelerator's lock.
    for (int i = 0; i < 200 || !prepared; ++i) {
      double lr = 0;
      accel_tensor* w = nullptr;
      failures += accel_optimizer_lr(t.o, &lr) != ACCEL_OK;
      failures += accel_model_tensor(t.m, "fc.weight", &w) != ACCEL_OK;
      failures += accel_optimizer_zero_grad(t.o) != ACCEL_OK;
      accel_tensor_free(w);
    }
  });
  std::this_thread::sleep_for(5ms);
  void* objs[] = {t.m, t.o, t.s};
  OK(accel_prepare(g_acc, objs, 3));
  prepared = true;
  user.join();
  EXPECT_EQ(failures.load(), 0);
  t.step(true);
}

TEST(Threads, HandlesFreedOnAnotherThreadWhileTraining) {
  // A garbage collector's finalizer thread frees outputs and inputs while the program trains.
  init_with({});
  Trainer t(4);
  void* objs[] = {t.m, t.o, t.s};
  OK(accel_prepare(g_acc, objs, 3));
  std::mutex mutex;
  std::vector<accel_tensor*> garbage;
  std::atomic<bool> done{false};
  std::thread finalizer([&] {
    while (!done) {
      std::vector<accel_tensor*> batch;
      {
        std::lock_guard<std::mutex> lock(mutex);
        batch.swap(garbage);
      }
      for (auto* g : batch) accel_tensor_free(g);
      std::this_thread::sleep_for(100us);
    }
  });
  for (int i = 0; i < 30; ++i) {
    OK(accel_accumulate(g_acc));
    accel_tensor_list* out = nullptr;
    const accel_tensor* in[] = {t.x};
    OK(accel_model_call(t.m, "loss", in, 1, &out));
    accel_tensor* loss = nullptr;
    OK(accel_tensor_list_get(out, 0, &loss));
    accel_tensor* again = nullptr;
    OK(accel_tensor_list_get(out, 0, &again));
    {
      std::lock_guard<std::mutex> lock(mutex);
      garbage.push_back(again);  // the graph stays alive through `loss`
    }
    accel_tensor_list_free(out);
    OK(accel_backward(g_acc, loss));
    OK(accel_optimizer_step(t.o));
    OK(accel_optimizer_zero_grad(t.o));
    std::lock_guard<std::mutex> lock(mutex);
    garbage.push_back(loss);
  }
  done = true;
  finalizer.join();
  for (auto* g : garbage) accel_tensor_free(g);
}

TEST(Threads, TheAcceleratorFreedWhileAPreparedObjectIsInUse) {
  init_with({});
  auto* t = new Trainer(6);
  void* objs[] = {t->m, t->o, t->s};
  OK(accel_prepare(g_acc, objs, 3));
  std::atomic<int> ok{0}, state{0}, other{0};
  std::atomic<bool> go{false};
  std::thread user([&] {
    go = true;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (state.load() < 10 && std::chrono::steady_clock::now() < deadline) {
      double lr = 0;
      const accel_status st = accel_optimizer_step(t->o);
      (st == ACCEL_OK ? ok : st == ACCEL_ERR_STATE ? state : other)++;
      if (accel_optimizer_lr(t->o, &lr) != ACCEL_OK) ++other;
    }
  });
  while (!go) std::this_thread::yield();
  accel_accelerator_free(g_acc);  // a running step finishes first; later ones report STATE
  g_acc = nullptr;
  user.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(state.load(), 0);
  delete t;
  init_with({});
}

TEST(Threads, ConfigFromManyThreads) {
  accel_config* c = nullptr;
  OK(accel_config_new(&c));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) {
        char buf[64];
        size_t n = 0;
        if (k % 2)
          failures += accel_config_set(c, "collective_timeout", i % 2 ? "12.5" : "30") != ACCEL_OK;
        else
          failures += accel_config_get(c, "collective_timeout", buf, sizeof buf, &n) != ACCEL_OK;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  accel_config_free(c);
}

TEST(Threads, EachThreadReadsItsOwnError) {
  // What the Go binding relies on: the message read right after the failing call on the same
  // thread is that call's, whatever other threads fail with meanwhile.
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      accel_config* c = nullptr;
      accel_config_new(&c);
      const std::string value = "bogus" + std::to_string(k);
      for (int i = 0; i < 500; ++i) {
        if (accel_config_set(c, "mixed_precision", value.c_str()) != ACCEL_ERR_CONFIG ||
            std::string(accel_last_error_message()).find(value) == std::string::npos ||
            accel_last_error_status() != ACCEL_ERR_CONFIG)
          ++mismatches;
      }
      accel_config_free(c);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}
