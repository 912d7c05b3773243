// A rank of the step-tool tests (step_tools_test.cpp): find_executable_batch_size agreeing across
// ranks, LocalSGD against DDP and against replicas simulated in one process, sync_each_batch,
// no_sync, the profiler's per-rank traces, local_main_process_first and the per-process helpers.
//   step_tools_program batch_fake LIMIT0 LIMIT1   tries above a rank's limit run out of memory
//   step_tools_program batch_real MIB0 MIB1       RLIMIT_AS: this rank's size now + MIB; a try of
//                                                 size n allocates n MiB
//   step_tools_program local_sgd K STEPS OUTER    K 0: plain DDP; OUTER none or nesterov
//   step_tools_program simulate P K STEPS OUTER   one process, P replicas in LibTorch alone
//   step_tools_program sync_each_batch ON
//   step_tools_program no_sync
//   step_tools_program profile DIR
//   step_tools_program local_first DIR
//   step_tools_program sizes      one process; per stdin line "START LIMIT": the sizes tried when
//                                 those above LIMIT run out of memory, and the result
//   step_tools_program windows    one process; per stdin line "WAIT WARMUP ACTIVE REPEAT SKIP
//                                 STEPS": how many windows the profiler completes
#define ACCEL_WITH_TORCH
#include <sys/resource.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <unistd.h>
#include <accel/accel.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace F = torch::nn::functional;
constexpr double kLr = 0.1;

// The batch rank `rank` trains on at `step`: 4 rows of 8 features, 4 targets (fp64).
std::pair<torch::Tensor, torch::Tensor> data_of(int rank, int step) {
  auto i = torch::arange(4, torch::kDouble).unsqueeze(1);
  auto x = torch::sin(1.0 + rank * 7 + step * 3 + i * 5 + torch::arange(8, torch::kDouble));
  auto y = torch::cos(rank + step * 2.0 + i + torch::arange(4, torch::kDouble) * 3);
  return {x, y};
}

torch::nn::Linear fp64_linear() {
  torch::manual_seed(1);
  torch::nn::Linear lin(8, 4);
  lin->to(torch::kDouble);
  return lin;
}

// The model's forward on rank `rank`'s batch of `step` (the accelerator's forward scope), its
// MSE loss and accel's backward.
void backward_of(accel::Accelerator& acc, accel::Model& model, torch::nn::Linear& lin, int rank,
                 int step) {
  auto [x, y] = data_of(rank, step);
  torch::Tensor loss;
  {
    auto scope = model.forward_scope();
    loss = F::mse_loss(lin->forward(x), y);
  }
  acc.backward(loss);
}

void print_params(const std::vector<torch::Tensor>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    std::printf("param %zu", i);
    auto v = params[i].detach().reshape(-1).contiguous();
    for (int64_t k = 0; k < v.numel(); ++k) std::printf(" %.17g", v[k].item<double>());
    std::printf("\n");
  }
}

// Every rank's copy of `t` must be bitwise equal.
void check_same_everywhere(accel::Accelerator& acc, const torch::Tensor& t, const char* what) {
  auto all = acc.gather(accel::Tensor(t.detach().clone().unsqueeze(0))).torch();
  for (int64_t r = 1; r < all.size(0); ++r)
    if (!torch::equal(all[r], all[0])) {
      std::fprintf(stderr, "rank %d: %s differs from rank 0's\n", acc.process_index(), what);
      std::exit(2);
    }
}

int batch_fake(int64_t limit0, int64_t limit1) {
  accel::Accelerator acc;
  const int64_t limit = acc.process_index() == 0 ? limit0 : limit1;
  std::string tried;
  const int64_t size = acc.find_executable_batch_size([&](int64_t n) {
    tried += " " + std::to_string(n);
    if (n > limit) throw accel::Error(ACCEL_ERR_OUT_OF_MEMORY, "fake out of memory");
  });
  std::printf("rank %d size %lld tried%s\n", acc.process_index(), static_cast<long long>(size),
              tried.c_str());
  return 0;
}

long long vm_size_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::atoll(line.c_str() + 7);
  return -1;
}

int batch_real(int64_t mib0, int64_t mib1) {
  accel::Accelerator acc;
  const int64_t mib = acc.process_index() == 0 ? mib0 : mib1;
  torch::ones({4, 1 << 18}).sum();  // LibTorch's first allocations, before the limit
  rlimit lim{};
  getrlimit(RLIMIT_AS, &lim);
  lim.rlim_cur = static_cast<rlim_t>(vm_size_kib() * 1024 + mib * (1 << 20));
  if (setrlimit(RLIMIT_AS, &lim) != 0) return 3;
  std::string failed;
  const int64_t size = acc.find_executable_batch_size([&](int64_t n) {
    try {
      auto t = torch::ones({n, 1 << 18});  // n MiB, written
      if (t.sum().item<double>() != static_cast<double>(n << 18)) std::exit(4);
    } catch (const std::exception&) {
      failed += " " + std::to_string(n);
      throw;
    }
  });
  std::printf("rank %d size %lld failed%s\n", acc.process_index(), static_cast<long long>(size),
              failed.c_str());
  return 0;
}

int local_sgd(int64_t every, int steps, const std::string& outer) {
  accel::Accelerator acc;
  auto lin = fp64_linear();
  auto model = accel::Model::from_module(*lin);
  accel::Optimizer opt(model, "sgd");
  opt.set("lr", std::to_string(kLr));
  acc.prepare(model, opt);
  std::unique_ptr<accel::LocalSgd> ls;
  if (every > 0) {
    ls = std::make_unique<accel::LocalSgd>(acc, model, every);
    ls->set("outer_optimizer", outer);
  }
  for (int step = 0; step < steps; ++step) {
    backward_of(acc, model, lin, acc.process_index(), step);
    opt.step();
    opt.zero_grad();
    if (ls) ls->step();
  }
  if (ls) ls->end();
  for (const auto& p : lin->parameters()) check_same_everywhere(acc, p, "a parameter");
  if (acc.is_main_process()) {
    print_params(lin->parameters());
    std::printf("averages %lld\n", ls ? static_cast<long long>(ls->average_count()) : -1LL);
  }
  return 0;
}

// P replicas trained apart in LibTorch, averaged (or DiLoCo's outer step) every K steps.
int simulate(int processes, int every, int steps, const std::string& outer) {
  const auto init = fp64_linear()->parameters();
  std::vector<std::vector<torch::Tensor>> replicas;
  for (int r = 0; r < processes; ++r) {
    std::vector<torch::Tensor> ps;
    for (const auto& p : init) ps.push_back(p.detach().clone().requires_grad_(true));
    replicas.push_back(ps);
  }
  std::vector<torch::Tensor> anchor, momentum;
  for (const auto& p : init) {
    anchor.push_back(p.detach().clone());
    momentum.push_back(torch::zeros_like(p));
  }
  int averages = 0, since = 0;
  auto average = [&] {
    torch::NoGradGuard g;
    for (size_t i = 0; i < init.size(); ++i) {
      auto sum = torch::zeros_like(anchor[i]);
      for (auto& ps : replicas) sum += ps[i];
      auto avg = sum / processes;
      if (outer == "nesterov") {
        auto delta = anchor[i] - avg;
        momentum[i].mul_(0.9).add_(delta);
        anchor[i].sub_((delta + momentum[i] * 0.9) * 0.7);
        avg = anchor[i].clone();
      }
      for (auto& ps : replicas) ps[i].copy_(avg);
    }
    ++averages;
    since = 0;
  };
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < processes; ++r) {
      auto [x, y] = data_of(r, step);
      auto& ps = replicas[static_cast<size_t>(r)];
      auto loss = F::mse_loss(torch::addmm(ps[1], x, ps[0].t()), y);
      auto grads = torch::autograd::grad({loss}, {ps[0], ps[1]});
      torch::NoGradGuard g;
      for (size_t i = 0; i < ps.size(); ++i) ps[i].sub_(grads[i] * kLr);
    }
    ++since;
    if ((step + 1) % every == 0) average();
  }
  if (since > 0) average();
  print_params(replicas[0]);
  std::printf("averages %d\n", averages);
  return 0;
}

double grad_sum(torch::nn::Linear& lin) {
  double s = 0;
  for (const auto& p : lin->parameters()) s += p.grad().sum().item<double>();
  return s;
}

int sync_each_batch(const std::string& on) {
  accel::Config cfg;
  cfg.set("gradient_accumulation_steps", "2").set("sync_each_batch", on);
  accel::Accelerator acc(cfg);
  auto lin = fp64_linear();
  auto model = accel::Model::from_module(*lin);
  accel::Optimizer opt(model, "sgd");
  opt.set("lr", std::to_string(kLr));
  acc.prepare(model, opt);
  for (int step = 0; step < 4; ++step) {
    acc.accumulate();
    backward_of(acc, model, lin, acc.process_index(), step);
    std::printf("grad %d %d %.17g\n", acc.process_index(), step, grad_sum(lin));
    opt.step();
    opt.zero_grad();
  }
  if (acc.is_main_process()) print_params(lin->parameters());
  return 0;
}

// Inside no_sync the ranks' gradients differ; the first backward after it reduces all three.
int no_sync() {
  accel::Accelerator acc;
  auto lin = fp64_linear();
  auto reference = fp64_linear();
  auto model = accel::Model::from_module(*lin);
  acc.prepare(model);
  const int rank = acc.process_index();
  auto backward = [&](int step) {
    backward_of(acc, model, lin, rank, step);
    auto [x, y] = data_of(rank, step);
    F::mse_loss(reference->forward(x), y).backward();  // this rank's own sum, in LibTorch alone
  };
  acc.no_sync(model, [&] {
    backward(0);
    backward(1);
  });
  std::printf("inside %d %.17g\n", rank, grad_sum(lin));
  backward(2);
  for (size_t i = 0; i < lin->parameters().size(); ++i) {
    auto own = reference->parameters()[i].grad();
    auto expected = acc.reduce(accel::Tensor(own.clone()), ACCEL_REDUCE_MEAN).torch();
    const double diff = (lin->parameters()[i].grad() - expected).abs().max().item<double>();
    if (diff > 1e-12) {
      std::fprintf(stderr, "rank %d: gradient %zu is %.3g from the mean of the sums\n", rank, i,
                   diff);
      return 2;
    }
  }
  check_same_everywhere(acc, lin->parameters()[0].grad(), "a gradient after no_sync");
  std::printf("after %d %.17g\n", rank, grad_sum(lin));
  return 0;
}

int profile(const std::string& dir) {
  accel::Accelerator acc;
  auto lin = fp64_linear();
  auto model = accel::Model::from_module(*lin);
  acc.prepare(model);
  accel::Profiler prof(acc);
  prof.set("output_trace_dir", dir).set("record_shapes", "true");
  prof.start();
  for (int step = 0; step < 3; ++step) {
    prof.step();
    backward_of(acc, model, lin, acc.process_index(), step);
  }
  prof.stop();
  std::printf("rank %d windows %lld\n", acc.process_index(),
              static_cast<long long>(prof.window_count()));
  return 0;
}

int local_first(const std::string& dir) {
  accel::Accelerator acc;
  const int rank = acc.process_index();
  acc.local_main_process_first([&] {
    if (acc.is_local_main_process()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::ofstream(dir + "/made") << "made\n";
    } else {
      std::printf("rank %d saw %s\n", rank, std::ifstream(dir + "/made").good() ? "it" : "nothing");
    }
  });
  acc.on_last_process([&] { std::printf("last %d\n", rank); });
  acc.on_main_process([&] { std::printf("main %d\n", rank); });
  acc.on_local_main_process([&] { std::printf("local main %d\n", rank); });
  acc.on_process(1, [&] { std::printf("process one %d\n", rank); });
  return 0;
}

int sizes() {
  accel::Accelerator acc;
  for (long long start = 0, limit = 0; std::cin >> start >> limit;) {
    std::string tried;
    try {
      const int64_t size = acc.find_executable_batch_size(
          [&](int64_t n) {
            tried += " " + std::to_string(n);
            if (n > limit) throw accel::Error(ACCEL_ERR_OUT_OF_MEMORY, "fake");
          },
          start);
      std::printf("tried%s -> %lld\n", tried.c_str(), static_cast<long long>(size));
    } catch (const accel::Error& e) {
      std::printf("tried%s -> error %s\n", tried.c_str(), e.what());
    }
  }
  return 0;
}

int windows() {
  accel::Accelerator acc;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string wait, warmup, active, repeat, skip;
    int steps = 0;
    if (!(in >> wait >> warmup >> active >> repeat >> skip >> steps)) continue;
    accel::Profiler prof(acc);
    prof.set("wait", wait).set("warmup", warmup).set("active", active);
    prof.set("repeat", repeat).set("skip_first", skip);
    prof.start();
    for (int i = 0; i < steps; ++i) {
      prof.step();
      torch::ones({3}).sum();
    }
    prof.stop();
    std::printf("%lld\n", static_cast<long long>(prof.window_count()));
  }
  return 0;
}

int dispatch(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  auto arg = [&](int i) { return i < argc ? std::string(argv[i]) : std::string(); };
  auto num = [&](int i) { return std::atoll(arg(i).c_str()); };
  if (mode == "batch_fake") return batch_fake(num(2), num(3));
  if (mode == "batch_real") return batch_real(num(2), num(3));
  if (mode == "local_sgd") return local_sgd(num(2), static_cast<int>(num(3)), arg(4));
  if (mode == "simulate")
    return simulate(static_cast<int>(num(2)), static_cast<int>(num(3)), static_cast<int>(num(4)),
                    arg(5));
  if (mode == "sync_each_batch") return sync_each_batch(arg(2));
  if (mode == "no_sync") return no_sync();
  if (mode == "profile") return profile(arg(2));
  if (mode == "local_first") return local_first(arg(2));
  if (mode == "sizes") return sizes();
  if (mode == "windows") return windows();
  std::fprintf(stderr, "step_tools_program: unknown mode '%s'\n", mode.c_str());
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
