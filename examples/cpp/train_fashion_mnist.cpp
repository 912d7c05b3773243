// train_fashion_mnist.cpp - PyTorch's C++ MNIST CNN, a torch::nn::Module of the user's own,
// trained on Fashion-MNIST with libaccel: the module stays the program's, libaccel makes it
// data-parallel (rank 0's weights, gradient synchronisation, the optimizer stepping its tensors).
//
//   ./train_fashion_mnist_cpp                          one process
//   accel launch -n 2 ./train_fashion_mnist_cpp        two processes, same code
//   options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1)
//            --bf16 --max-steps S (0: whole epochs) --data DIR (/usr/share/datasets/fashion-mnist)
//            --workers W (1)
//
// The same run as examples/c/train_fashion_mnist.c (AdamW, linear warmup/decay, evaluation with
// gather_for_metrics), with the model written in C++ instead of TorchScript. Progress goes through
// the accelerator's logger (ACCELERATE_LOG_LEVEL=warning silences it); loss, lr, samples/s and the
// test accuracy go to the trackers the configuration names (ACCEL_LOG_WITH=all
// ACCEL_LOGGING_DIR=runs: runs/train_fashion_mnist_cpp/).
#define ACCEL_WITH_TORCH
#include <accel/accel.hpp>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Net : torch::nn::Module {
  Net()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(const torch::Tensor& images) {
    auto x = images.to(torch::kFloat).div(255.0).sub(0.2860).div(0.3530).unsqueeze(1);
    x = torch::relu(conv1->forward(x));
    x = torch::relu(conv2->forward(x));
    x = torch::max_pool2d(x, {2, 2});
    x = torch::dropout(x, 0.25, is_training());
    x = torch::flatten(x, 1);
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, 0.5, is_training());
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};

struct Options {
  int epochs = 2, batch = 64, accum = 1, workers = 1;
  long max_steps = 0;
  double lr = 1e-3;
  bool bf16 = false;
  std::string data = "/usr/share/datasets/fashion-mnist";
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--epochs" && value)
      o.epochs = std::atoi(argv[++i]);
    else if (a == "--batch-size" && value)
      o.batch = std::atoi(argv[++i]);
    else if (a == "--lr" && value)
      o.lr = std::atof(argv[++i]);
    else if (a == "--accum" && value)
      o.accum = std::atoi(argv[++i]);
    else if (a == "--max-steps" && value)
      o.max_steps = std::atol(argv[++i]);
    else if (a == "--data" && value)
      o.data = argv[++i];
    else if (a == "--workers" && value)
      o.workers = std::atoi(argv[++i]);
    else if (a == "--bf16")
      o.bf16 = true;
    else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", a.c_str(),
                   __FILE__);
      return false;
    }
  }
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char line[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  return line;
}

// Evaluation: each test sample counted once over all processes.
double evaluate(accel::Accelerator& acc, accel::Model& model, Net& net, accel::DataLoader& test,
                double elapsed) {
  model.eval();
  net.eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  while (auto batch = test.next()) {
    torch::Tensor hits;
    {
      auto scope = model.forward_scope();
      hits = net.forward((*batch)[0].torch()).argmax(1).eq((*batch)[1].torch().to(torch::kLong));
    }
    const auto all = acc.gather_for_metrics(hits.to(torch::kLong)).torch();
    correct += all.sum().item<int64_t>();
    seen += all.numel();
  }
  const double accuracy = static_cast<double>(correct) / static_cast<double>(seen);
  acc.print(format("test accuracy %.4f (%lld of %lld) after %.1fs of training", accuracy,
                   static_cast<long long>(correct), static_cast<long long>(seen), elapsed));
  return accuracy;
}

int run(const Options& o) {
  accel::Config config;
  config.set("gradient_accumulation_steps", std::to_string(o.accum));
  if (o.bf16) config.set("mixed_precision", "bf16");
  accel::Accelerator acc(config);
  const int world = acc.num_processes();
  acc.set_seed(1234);

  Net net;
  auto model = accel::Model::from_module(net);

  auto train_set = accel::Dataset::from_idx(
      {o.data + "/train-images-idx3-ubyte.gz", o.data + "/train-labels-idx1-ubyte.gz"});
  auto test_set = accel::Dataset::from_idx(
      {o.data + "/t10k-images-idx3-ubyte.gz", o.data + "/t10k-labels-idx1-ubyte.gz"});
  accel::DataLoader train(acc, train_set);
  train.set("batch_size", std::to_string(o.batch)).set("shuffle", "true").set("seed", "42");
  train.set("num_workers", std::to_string(o.workers));
  accel::DataLoader test(acc, test_set);
  test.set("batch_size", "100").set("num_workers", "1");
  int64_t total_steps = train.batch_count() * o.epochs;
  if (o.max_steps > 0 && o.max_steps < total_steps) total_steps = o.max_steps;

  accel::Optimizer opt(model, "adamw");
  opt.set("lr", format("%g", o.lr));
  // The schedule counts single-process optimizer steps (see accel_scheduler_new).
  const int64_t schedule_steps = total_steps * world / o.accum;
  accel::Scheduler sched(opt, "linear");
  sched.set("warmup_steps", std::to_string(schedule_steps / 10))
      .set("total_steps", std::to_string(schedule_steps));
  acc.prepare(model, opt, sched, train, test);
  acc.info(format("%d process(es), %lld parameters, %lld steps of %d per process%s", world,
                  static_cast<long long>(model.parameter_element_count()),
                  static_cast<long long>(total_steps), o.batch, o.bf16 ? ", bf16" : ""));
  // The run's trackers: none unless the configuration names them (ACCEL_LOG_WITH=tensorboard).
  const accel::Values hparams{{"lr", o.lr},
                              {"batch_size", static_cast<double>(o.batch)},
                              {"processes", static_cast<double>(world)},
                              {"gradient_accumulation_steps", static_cast<double>(o.accum)}};
  acc.init_trackers("train_fashion_mnist_cpp", &hparams);

  const auto start = std::chrono::steady_clock::now();
  double loss_avg = 0, waited = 0;
  int64_t step = 0;
  for (int epoch = 0; epoch < o.epochs && step < total_steps; ++epoch) {
    train.set_epoch(epoch);
    model.train();
    net.train();
    for (;;) {
      const auto asked = std::chrono::steady_clock::now();
      auto batch = train.next();
      waited += seconds_since(asked);  // the time this step waited for its batch
      if (!batch) break;               // the end of the epoch
      acc.accumulate();
      torch::Tensor loss;
      {
        auto scope = model.forward_scope();
        loss = torch::cross_entropy_loss(net.forward((*batch)[0].torch()),
                                         (*batch)[1].torch().to(torch::kLong));
      }
      acc.backward(loss);
      opt.step();
      sched.step();
      opt.zero_grad();
      const double value = loss.item<double>();
      loss_avg = step == 0 ? value : 0.98 * loss_avg + 0.02 * value;
      ++step;
      if (step % 10 == 0 || step == total_steps) {
        const double rate = static_cast<double>(step) * o.batch * world / seconds_since(start);
        acc.log({{"loss", loss_avg}, {"lr", sched.lr()}, {"samples_per_s", rate}}, step);
      }
      if (step % 100 == 0 || step == total_steps) {
        const double elapsed = seconds_since(start);
        const double rate = static_cast<double>(step) * o.batch * world / elapsed;
        acc.info(
            format("epoch %d step %lld/%lld loss %.4f %.0f samples/s ETA %.0fs data wait %.2f%%",
                   epoch + 1, static_cast<long long>(step), static_cast<long long>(total_steps),
                   loss_avg, rate, static_cast<double>(total_steps - step) * o.batch * world / rate,
                   100.0 * waited / elapsed));
      }
      if (step >= total_steps) break;
    }
  }
  const double accuracy = evaluate(acc, model, net, test, seconds_since(start));
  acc.log({{"accuracy", accuracy}}, step);
  acc.end_training();
  acc.wait_for_everyone();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  try {
    return run(o);
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
