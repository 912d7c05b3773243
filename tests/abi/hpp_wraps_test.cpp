// accel.hpp's wrappers of the C functions it gained for issues 49 and 50 (bindings/left_out.txt
// lists the ones it still leaves out): one process, each against what the C function returns.
#include <accel/accel.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

TEST(CppWraps, VersionAccelerator) {
  EXPECT_EQ(accel::version_number(), accel_version_number());
  EXPECT_EQ(accel::version_number(), static_cast<uint32_t>(ACCEL_VERSION_NUMBER));
  accel::Accelerator acc;
  EXPECT_EQ(acc.distributed_type(), ACCEL_DISTRIBUTED_NO);
  EXPECT_FALSE(acc.effective_config().empty());
  EXPECT_EQ(acc.main_process_first([] { return 3; }), 3);
  bool ran = false;
  acc.main_process_first([&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_THROW(acc.main_process_first([]() -> int { throw std::runtime_error("x"); }),
               std::runtime_error);
}

TEST(CppWraps, CollectivesOfOneProcess) {
  accel::Accelerator acc;
  auto t = accel::Tensor::from_data<float>({1, 2, 3}, {3});
  EXPECT_EQ(acc.pad_across_processes(t, 0, -1.0, true).to_vector<float>(),
            (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(acc.gather_object(std::string("he\0llo", 6)),
            (std::vector<std::string>{std::string("he\0llo", 6)}));
  EXPECT_EQ(acc.gather_object(""), (std::vector<std::string>{""}));
}

TEST(CppWraps, DataLoaderCursor) {
  accel::Accelerator acc;
  auto x = accel::Tensor::from_data<float>({1, 2, 3, 4, 5}, {5});
  auto y = accel::Tensor::from_data<int64_t>({0, 1, 0, 1, 0}, {5});
  auto ds = accel::Dataset::from_tensors({x, y});
  EXPECT_EQ(ds.field_count(), 2u);
  accel::DataLoader dl(acc, ds);
  dl.set("batch_size", "2");
  EXPECT_EQ(dl.field_count(), 2u);
  EXPECT_EQ(dl.epoch(), 0);
  dl.skip_first_batches(1);
  int batches = 0;
  bool ended = false;
  while (auto batch = dl.next()) {
    ++batches;
    ended = dl.end_of_epoch();
  }
  EXPECT_EQ(batches, 2);
  EXPECT_TRUE(ended);
  EXPECT_EQ(dl.remainder(), 1);
  dl.set_position(4, 2);
  EXPECT_EQ(dl.position(), std::make_pair(int64_t{4}, int64_t{2}));
  dl.close();
  EXPECT_THROW(dl.next(), accel::Error);
}

// The step helpers of issue 50 through accel.hpp, in one process.

TEST(CppWraps, ClipGradValueClampsEveryGradient) {
  accel::Accelerator acc;
  accel::Model model;
  model.add_layer("fc", "linear", "in_features=2 out_features=1");
  model.define("def loss(self, x):\n    return self.fc.forward(x).sum()\n");
  accel::Optimizer opt(model, "sgd");
  opt.set("lr", "1.0");
  acc.prepare(model, opt);
  const auto before = model.tensor("fc.weight").to_vector<float>();
  const auto bias_before = model.tensor("fc.bias").to_vector<float>();
  // d(sum(x w + b))/dw = sum of x's rows = (3, -0.2); /db = 2 rows = 2.
  auto x = accel::Tensor::from_data<float>({1.0f, -0.1f, 2.0f, -0.1f}, {2, 2});
  acc.backward(model.call("loss", {x})[0]);
  acc.clip_grad_value(model, 0.5);
  opt.step();  // lr 1: the parameters move by exactly the clipped gradients
  const auto after = model.tensor("fc.weight").to_vector<float>();
  EXPECT_FLOAT_EQ(before[0] - after[0], 0.5f);
  EXPECT_NEAR(before[1] - after[1], -0.2f, 1e-6);
  EXPECT_FLOAT_EQ(bias_before[0] - model.tensor("fc.bias").to_vector<float>()[0], 0.5f);
}

TEST(CppWraps, FindExecutableBatchSize) {
  accel::Accelerator acc;
  std::vector<int64_t> tried;
  const int64_t size = acc.find_executable_batch_size([&](int64_t n) {
    tried.push_back(n);
    if (n > 8) throw accel::Error(ACCEL_ERR_OUT_OF_MEMORY, "fake");
  });
  EXPECT_EQ(size, 8);
  EXPECT_EQ(tried, (std::vector<int64_t>{128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36,
                                         32,  28,  25,  22, 19, 17, 15, 13, 11, 9,  8}));
  // std::bad_alloc counts as out of memory; another exception comes back as it was thrown.
  EXPECT_EQ(acc.find_executable_batch_size(
                [](int64_t n) {
                  if (n > 3) throw std::bad_alloc();
                },
                4),
            3);
  struct Mine : std::runtime_error {
    Mine() : std::runtime_error("mine") {}
  };
  EXPECT_THROW(acc.find_executable_batch_size([](int64_t) { throw Mine(); }), Mine);
  try {
    acc.find_executable_batch_size([](int64_t) {}, 0);
    ADD_FAILURE() << "a start of 0 ran";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_OUT_OF_MEMORY);
    EXPECT_NE(std::string(e.what()).find("No executable batch size found, reached zero."),
              std::string::npos);
  }
}

TEST(CppWraps, NoSyncLocalSgdAndTheProcessHelpers) {
  accel::Accelerator acc;
  accel::Model model;
  model.add_layer("fc", "linear", "in_features=2 out_features=1");
  EXPECT_EQ(acc.no_sync(model, [&] { return acc.no_sync(model, [] { return 7; }); }), 7);
  EXPECT_THROW(acc.no_sync(model, []() -> int { throw std::runtime_error("x"); }),
               std::runtime_error);
  accel::LocalSgd local(acc, model, 2);
  local.set("outer_optimizer", "nesterov");
  for (int i = 0; i < 5; ++i) local.step();
  local.end();
  EXPECT_EQ(local.average_count(), 0);  // one process: nothing to average
  EXPECT_THROW(accel::LocalSgd(acc, model, 0), accel::Error);
  EXPECT_TRUE(acc.is_last_process());
  int ran = 0;
  acc.on_main_process([&] { ++ran; });
  acc.on_local_main_process([&] { ++ran; });
  acc.on_last_process([&] { ++ran; });
  acc.on_process(0, [&] { ++ran; });
  acc.on_process(1, [&] { ran += 100; });
  EXPECT_EQ(ran, 4);
  EXPECT_EQ(acc.local_main_process_first([] { return 5; }), 5);
}

TEST(CppWraps, ProfilerWindowsTableAndACallbacksException) {
  accel::Accelerator acc;
  accel::Profiler prof(acc);
  int windows = 0;
  prof.set("wait", "1").set("warmup", "1").set("active", "2").set("repeat", "2");
  prof.on_trace_ready([&](accel::Profiler& p) {
    ++windows;
    EXPECT_NE(p.table().find("Self CPU time total:"), std::string::npos);
  });
  prof.start();
  auto x = accel::Tensor::from_data<float>({1, 2, 3}, {3});
  for (int i = 0; i < 20; ++i) {
    prof.step();
    acc.reduce(x);
  }
  prof.stop();
  EXPECT_EQ(windows, 2);
  EXPECT_EQ(prof.window_count(), 2);
  accel::Profiler failing(acc);
  failing.set("active", "1").on_trace_ready([](accel::Profiler&) {
    throw std::logic_error("from the callback");
  });
  failing.start();
  EXPECT_THROW(failing.step(), std::logic_error);
  EXPECT_THROW(failing.step(), std::logic_error);  // the next window was recorded all the same
}

TEST(CppWraps, Tokenizer) {
  const std::string path = "/tmp/accel_hpp_wraps_vocab_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n";
  auto tok = accel::Tokenizer::load(path);
  std::remove(path.c_str());
  EXPECT_EQ(tok.encode("Hello worlds"), (std::vector<int64_t>{2, 4, 5, 6, 3}));
  EXPECT_EQ(tok.encode("Hello worlds", 3), (std::vector<int64_t>{2, 4, 3}));
  // More ids than encode's first buffer holds: the second call sizes it.
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "hello ";
  EXPECT_EQ(tok.encode(long_text).size(), 102u);
  auto [ids, mask] = tok.encode_batch({"hello", "worlds hello"});
  EXPECT_EQ(ids.shape(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(ids.to_vector<int64_t>(), (std::vector<int64_t>{2, 4, 3, 0, 0, 2, 5, 6, 4, 3}));
  EXPECT_EQ(mask.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(tok.token_id("[SEP]"), 3);
  EXPECT_EQ(tok.vocab_size(), 7u);
  try {
    tok.token_id("nope");
    ADD_FAILURE() << "no exception";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_INVALID_ARGUMENT);
  }
  EXPECT_THROW(accel::Tokenizer::load("/nonexistent/vocab.txt"), accel::Error);
}

TEST(CppWraps, InferDeviceMapAndDispatch) {
  // Two Linear(4, 4) layers in a chain, saved, then dispatched with one of them on disk.
  accel::Accelerator acc;
  auto build = [] {
    accel::Model m;
    m.add_layer("l0", "linear", "in_features=4 out_features=4");
    m.add_layer("l1", "linear", "in_features=4 out_features=4");
    m.define("def forward(self, x):\n    return self.l1.forward(self.l0.forward(x))\n");
    return m;
  };
  auto full = build();
  const std::string dir = ::testing::TempDir() + "hpp_dispatch";
  acc.save_model(full, dir);
  const auto x = accel::Tensor::from_data<float>(std::vector<float>(8, 0.5f), {2, 4});
  const auto want = full.call("forward", {x})[0].to_vector<float>();
  auto model = build();
  const auto map = model.infer_device_map("max_memory=cpu:100,disk");  // a layer is 80 bytes
  std::string lines;
  bool offloaded = false;
  for (const auto& line : map) {
    lines += line + "\n";
    offloaded = offloaded || (line.size() >= 5 && line.compare(line.size() - 5, 5, "=disk") == 0);
  }
  EXPECT_TRUE(offloaded) << lines;
  model.dispatch(dir, lines);
  EXPECT_EQ(model.call("forward", {x})[0].to_vector<float>(), want);
  try {
    build().infer_device_map("max_memory=cpu:100");
    FAIL() << "a map that cannot fit";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_OUT_OF_MEMORY) << e.what();
  }
}

namespace {

// The Trainer run of tests/mp/trainer_events.txt (accumulation 2; 24 training and 10 evaluation
// samples of 8 features, batch 4), through accel.hpp; `step` replaces the training step when set.
struct TrainerRun {
  accel::Accelerator acc;
  accel::Model model;
  accel::Optimizer opt;
  accel::Scheduler sched;
  accel::DataLoader train, eval;
  static accel::Config config() {
    accel::Config c;
    c.set("gradient_accumulation_steps", "2");
    return c;
  }
  static accel::Dataset data(int n) {
    std::vector<float> x(static_cast<size_t>(n) * 8);
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      y[i] = i % 4;
      for (int f = 0; f < 8; ++f) x[i * 8 + f] = static_cast<float>((i * 31 + f * 17) % 13) / 13;
    }
    auto tx = accel::Tensor::from_data(x, {n, 8});
    auto ty = accel::Tensor::from_data(y, {n});
    return accel::Dataset::from_tensors({tx, ty});
  }
  static accel::Model make_model(accel::Accelerator& acc) {
    acc.set_seed(42);
    accel::Model m;
    m.add_layer("fc", "linear", "in_features=8 out_features=4");
    m.define(
        "def training_step(self, x, y):\n"
        "    return torch.cross_entropy_loss(self.fc.forward(x), y)\n"
        "def eval_step(self, x, y):\n"
        "    logits = self.fc.forward(x)\n"
        "    return torch.cross_entropy_loss(logits, y), logits.argmax(1)\n");
    return m;
  }
  TrainerRun()
      : acc(config()),
        model(make_model(acc)),
        opt(model, "adamw"),
        sched(opt, "constant"),
        train(loader(acc, 24)),
        eval(loader(acc, 10)) {}
  static accel::DataLoader loader(accel::Accelerator& acc, int n) {
    auto ds = data(n);
    accel::DataLoader l(acc, ds);
    l.set("batch_size", "4");
    return l;
  }
};

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(CppWraps, TrainerEventsInTransformersOrder) {
  const std::string dir = ::testing::TempDir() + "hpp_trainer_" + std::to_string(getpid());
  TrainerRun r;
  accel::Trainer t(r.acc, r.model, r.opt, &r.sched, r.train, &r.eval,
                   "num_train_epochs=2,logging_steps=2,logging_first_step=true,"
                   "eval_strategy=steps,eval_steps=3,save_strategy=steps,save_steps=3,"
                   "save_total_limit=2,speed_metrics=false,output_dir=" +
                       dir);
  std::vector<std::string> seen;
  t.add_callback([&](accel::TrainerContext& ctx, accel::TrainerEvent e, const accel::Metrics*) {
    seen.push_back(accel::event_name(e) + " " + std::to_string(ctx.global_step()));
  });
  t.set_compute_metrics([](const accel::Tensor& predictions, const accel::Tensor& labels) {
    const auto p = predictions.to_vector<int64_t>(), l = labels.to_vector<int64_t>();
    double hits = 0;
    for (size_t i = 0; i < p.size(); ++i) hits += p[i] == l[i];
    return accel::Metrics{{"accuracy", hits / static_cast<double>(p.size())}};
  });
  t.train();
  const auto metrics = t.evaluate();
  EXPECT_EQ(metrics.count("eval_accuracy"), 1u);
  EXPECT_EQ(metrics.count("eval_loss"), 1u);
  const auto p = t.predict(r.eval);
  EXPECT_EQ(p.predictions.element_count(), 10);
  EXPECT_EQ(p.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(seen, file_lines(TRAINER_EVENTS_FILE));
  EXPECT_EQ(t.global_step(), 6);
  EXPECT_NE(t.state_json().find("\"global_step\": 6,"), std::string::npos);
  std::remove((dir + "/checkpoint-3").c_str());
}

TEST(CppWraps, TrainerStepInCppIsTheDefaultStepAndExceptionsComeBack) {
  std::vector<float> want, got;
  for (bool own_step : {false, true}) {
    TrainerRun r;
    accel::Trainer t(r.acc, r.model, r.opt, &r.sched, r.train, &r.eval,
                     "max_steps=6,save_strategy=no,speed_metrics=false");
    if (own_step)
      t.set_training_step([&](const std::vector<accel::Tensor>& batch) {
        return std::move(r.model.call("training_step", {batch[0], batch[1]})[0]);
      });
    t.train();
    auto w = r.model.tensor("fc.weight").to_vector<float>();
    (own_step ? got : want) = w;
  }
  EXPECT_EQ(got, want) << "bitwise";
  TrainerRun r;
  accel::Trainer t(r.acc, r.model, r.opt, &r.sched, r.train, nullptr,
                   "max_steps=6,save_strategy=no");
  t.add_callback([](accel::TrainerContext& ctx, accel::TrainerEvent e, const accel::Metrics*) {
    if (e == accel::TrainerEvent::step_end && ctx.global_step() == 3)
      ctx.set_control("should_training_stop", true);
  });
  t.train();
  EXPECT_EQ(t.global_step(), 3);
  t.add_callback([](accel::TrainerContext&, accel::TrainerEvent e, const accel::Metrics*) {
    if (e == accel::TrainerEvent::step_end) throw std::out_of_range("from the callback");
  });
  EXPECT_THROW(t.train(), std::out_of_range);
}

// auto_find_batch_size from C++: a step that throws running out of memory (an accel::Error of
// ACCEL_ERR_OUT_OF_MEMORY, or LibTorch's message) above 3 rows is tried again smaller; the run
// found is bitwise the run started at 3. Without the setting the step's failure is the call's.
TEST(CppWraps, TrainerAutoFindBatchSizeRetriesWhatRanOutOfMemory) {
  const std::string dir = ::testing::TempDir() + "hpp_auto_batch_" + std::to_string(getpid());
  const std::string settings = "max_steps=6,save_strategy=no,speed_metrics=false,output_dir=" + dir;
  std::vector<float> want, got;
  for (int start : {3, 5}) {  // 5, then int(5 * 0.9) = 4, then 3
    TrainerRun r;
    r.train.set("batch_size", std::to_string(start));
    accel::Trainer t(r.acc, r.model, r.opt, &r.sched, r.train, nullptr,
                     settings + ",auto_find_batch_size=true");
    int calls = 0;
    t.set_training_step([&](const std::vector<accel::Tensor>& batch) {
      if (batch[0].shape()[0] > 3) {
        if (++calls == 1) throw accel::Error(ACCEL_ERR_OUT_OF_MEMORY, "pretend");
        throw std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB");
      }
      return std::move(r.model.call("training_step", {batch[0], batch[1]})[0]);
    });
    t.train();
    EXPECT_NE(t.state_json().find("\"train_batch_size\": 3,"), std::string::npos);
    EXPECT_EQ(calls, start == 5 ? 2 : 0);
    (start == 3 ? want : got) = r.model.tensor("fc.weight").to_vector<float>();
  }
  EXPECT_EQ(got, want) << "bitwise";
  TrainerRun r;
  accel::Trainer t(r.acc, r.model, r.opt, &r.sched, r.train, nullptr, settings);
  t.set_training_step([](const std::vector<accel::Tensor>&) -> accel::Tensor {
    throw accel::Error(ACCEL_ERR_OUT_OF_MEMORY, "pretend");
  });
  try {
    t.train();
    ADD_FAILURE() << "no error";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_OUT_OF_MEMORY) << e.what();
  }
}
