// The benchmark models' ATen operations one by one, timed alike on whichever LibTorch the build
// uses: run it from build/ and build-torch2/ to see which operations differ between lines.
//   build/bin/aten_ops_bench [threads] [mlp|cnn]   (median of 5 rounds, microseconds per call)
// mlp: its GEMMs, ReLU, the input normalisation and AdamW's element-wise passes over 269K
// parameters; cnn: its convolutions forward and backward, pooling, dropout, fc1, and AdamW's sqrt
// over its 1.2M parameters.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "compat/torch_version.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace {

using Ops = std::vector<std::pair<std::string, std::function<void()>>>;

Ops mlp_ops() {
  const int64_t params = 269322;  // 784*256 + 256 + 256*256 + 256 + 256*10 + 10
  auto x = at::rand({64, 784}), w1 = at::rand({256, 784}), b1 = at::rand({256});
  auto h = at::rand({64, 256}), w2 = at::rand({256, 256}), w3 = at::rand({10, 256});
  auto g = at::rand({64, 256});
  auto p = at::rand({params}), m = at::rand({params}), v = at::rand({params}),
       grad = at::rand({params});
  auto images = at::randint(0, 255, {64, 784}, at::kByte);
  return {
      {"addmm 64x784 @ 784x256 (fc1 forward)", [=] { at::addmm(b1, x, w1.t()); }},
      {"mm 256x64 @ 64x784 (fc1 weight grad)", [=] { at::mm(g.t(), x); }},
      {"mm 64x256 @ 256x256 (fc2 forward)", [=] { at::mm(h, w2.t()); }},
      {"mm 64x256 @ 256x10 (fc3 forward)", [=] { at::mm(h, w3.t()); }},
      {"relu 64x256", [=] { at::relu(h); }},
      {"uint8 -> normalised float 64x784",
       [=] { images.to(at::kFloat).div(255.0).sub(0.286).div(0.353); }},
      {"AdamW exp_avg: mul_, add_", [=]() mutable { m.mul_(0.9).add_(grad, 0.1); }},
      {"AdamW exp_avg_sq: mul_, addcmul_",
       [=]() mutable { v.mul_(0.999).addcmul_(grad, grad, 0.001); }},
      {"AdamW sqrt", [=] { v.sqrt(); }},
      {"AdamW denominator: div_, add_", [=]() mutable { v.div_(1.0001).add_(1e-8); }},
      {"AdamW addcdiv_", [=]() mutable { p.addcdiv_(m, v, -1e-12); }},
  };
}

// The CNN of examples/c/train_fashion_mnist.c, batch 64: conv 1->32, conv 32->64 (3x3), max pool,
// dropout, fc 9216->128, fc 128->10.
Ops cnn_ops() {
  auto x = at::rand({64, 1, 28, 28}), w1 = at::rand({32, 1, 3, 3}), b1 = at::rand({32});
  auto a1 = at::rand({64, 32, 26, 26}), w2 = at::rand({64, 32, 3, 3}), b2 = at::rand({64});
  auto a2 = at::rand({64, 64, 24, 24}), g2 = at::rand({64, 64, 24, 24});
  auto g1 = at::rand({64, 32, 26, 26});
  auto pooled = at::max_pool2d_with_indices(a2, {2, 2});
  auto gp = at::rand({64, 64, 12, 12});
  auto f = at::rand({64, 9216}), wf = at::rand({128, 9216}), gf = at::rand({64, 128});
  auto state = at::rand({1199882});
  const std::vector<int64_t> one{1, 1}, zero{0, 0};
  const std::array<bool, 3> all{true, true, true}, no_input{false, true, true};
  return {
      {"conv2d 1->32 forward", [=] { at::conv2d(x, w1, b1); }},
      {"conv2d 32->64 forward", [=] { at::conv2d(a1, w2, b2); }},
      {"conv2d 32->64 backward (input, weight)",
       [=] {
         at::convolution_backward(g2, a1, w2, std::vector<int64_t>{64}, one, zero, one, false, zero,
                                  1, all);
       }},
      {"conv2d 1->32 backward (weight)",
       [=] {
         at::convolution_backward(g1, x, w1, std::vector<int64_t>{32}, one, zero, one, false, zero,
                                  1, no_input);
       }},
      {"relu 64x64x24x24", [=] { at::relu(a2); }},
      {"max_pool2d 2x2 forward",
       [=] {
         at::max_pool2d_with_indices(a2, {2, 2});
       }},
      {"max_pool2d 2x2 backward",
       [=] {
         at::max_pool2d_with_indices_backward(gp, a2, {2, 2}, {2, 2}, zero, one, false,
                                              std::get<1>(pooled));
       }},
      {"dropout 0.25 64x64x12x12", [=] { at::dropout(gp, 0.25, true); }},
      {"addmm 64x9216 @ 9216x128 (fc1 forward)", [=] { at::mm(f, wf.t()); }},
      {"mm 128x64 @ 64x9216 (fc1 weight grad)", [=] { at::mm(gf.t(), f); }},
      {"AdamW sqrt (1.2M)", [=] { state.sqrt(); }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const std::string model = argc > 2 ? argv[2] : "mlp";
  at::set_num_threads(threads);
  at::manual_seed(0);
  const Ops ops = model == "cnn" ? cnn_ops() : mlp_ops();
  const int calls = model == "cnn" ? 20 : 2000;
  std::printf("LibTorch %s, %d thread(s), %s: median us per call\n", TORCH_VERSION, threads,
              model.c_str());
  for (const auto& [name, op] : ops) {
    std::vector<double> rounds;
    for (int r = 0; r < 5; ++r) {
      for (int i = 0; i < calls / 20; ++i) op();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) op();
      rounds.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          calls);
    }
    std::sort(rounds.begin(), rounds.end());
    std::printf("%-40s %9.2f\n", name.c_str(), rounds[2]);
  }
  return 0;
}
