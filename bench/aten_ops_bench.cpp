// The MLP benchmark's ATen operations one by one (its GEMMs, ReLU, the input normalisation and the
// AdamW step's element-wise passes over its 269K parameters), timed alike on whichever LibTorch the
// build uses: run it from build/ and build-torch2/ to see which operations differ between lines.
//   build/bin/aten_ops_bench [threads]      (median of 5 rounds of 2000 calls, microseconds)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "compat/torch_version.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  at::set_num_threads(threads);
  at::manual_seed(0);
  const int64_t params = 269322;  // 784*256 + 256 + 256*256 + 256 + 256*10 + 10
  auto x = at::rand({64, 784}), w1 = at::rand({256, 784}), b1 = at::rand({256});
  auto h = at::rand({64, 256}), w2 = at::rand({256, 256}), w3 = at::rand({10, 256});
  auto g = at::rand({64, 256});
  auto p = at::rand({params}), m = at::rand({params}), v = at::rand({params}),
       grad = at::rand({params});
  auto images = at::randint(0, 255, {64, 784}, at::kByte);
  const std::vector<std::pair<std::string, std::function<void()>>> ops = {
      {"addmm 64x784 @ 784x256 (fc1 forward)", [&] { at::addmm(b1, x, w1.t()); }},
      {"mm 256x64 @ 64x784 (fc1 weight grad)", [&] { at::mm(g.t(), x); }},
      {"mm 64x256 @ 256x256 (fc2 forward)", [&] { at::mm(h, w2.t()); }},
      {"mm 64x256 @ 256x10 (fc3 forward)", [&] { at::mm(h, w3.t()); }},
      {"relu 64x256", [&] { at::relu(h); }},
      {"uint8 -> normalised float 64x784",
       [&] { images.to(at::kFloat).div(255.0).sub(0.286).div(0.353); }},
      {"AdamW exp_avg: mul_, add_", [&] { m.mul_(0.9).add_(grad, 0.1); }},
      {"AdamW exp_avg_sq: mul_, addcmul_", [&] { v.mul_(0.999).addcmul_(grad, grad, 0.001); }},
      {"AdamW sqrt", [&] { v.sqrt(); }},
      {"AdamW denominator: div_, add_", [&] { v.div_(1.0001).add_(1e-8); }},
      {"AdamW addcdiv_", [&] { p.addcdiv_(m, v, -1e-12); }},
  };
  std::printf("LibTorch %s, %d thread(s): median us per call\n", TORCH_VERSION, threads);
  for (const auto& [name, op] : ops) {
    std::vector<double> rounds;
    for (int r = 0; r < 5; ++r) {
      for (int i = 0; i < 100; ++i) op();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; ++i) op();
      rounds.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          2000);
    }
    std::sort(rounds.begin(), rounds.end());
    std::printf("%-40s %9.2f\n", name.c_str(), rounds[2]);
  }
  return 0;
}
