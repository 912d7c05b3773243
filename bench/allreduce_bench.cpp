// allreduce_bench.cpp - the bare sum all-reduce of libaccel's communicator (the collective that
// gradient synchronisation is built on), for given element counts of fp32; over Gloo when
// ACCEL_SHARED_MEMORY_ALLREDUCE is 0 or false. Prints one JSON line per size on each rank:
//
//   BENCH {"numel":10512394,"bytes":42049576,"allreduce_ms":...}
//
//   accel launch -n 2 allreduce_bench [--steps 10] --numel 269322,10512394,50397194
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "runtime/communicator.hpp"
#include "runtime/process_place.hpp"

int main(int argc, char** argv) {
  int steps = 10;
  std::vector<long long> sizes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--numel") && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');)
        sizes.push_back(std::atoll(item.c_str()));
    } else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
                   __FILE__);
      return 2;
    }
  }
  if (steps < 1 || sizes.empty() ||
      std::any_of(sizes.begin(), sizes.end(), [](long long n) { return n < 1; })) {
    std::fprintf(stderr, "--steps must be at least 1 and --numel a list of positive counts\n");
    return 2;
  }
  try {
    const auto place = accel::runtime::read_process_place(accel::config::process_environment());
    accel::runtime::CommOptions options;
    const char* shm = std::getenv("ACCEL_SHARED_MEMORY_ALLREDUCE");
    options.shared_memory = !(shm && (!std::strcmp(shm, "0") || !std::strcmp(shm, "false")));
    accel::runtime::Communicator comm(place, options);
    for (long long numel : sizes) {
      at::Tensor t = at::ones({numel}, at::kFloat);
      std::vector<double> ms;
      for (int i = -2; i < steps; ++i) {
        const auto start = std::chrono::steady_clock::now();
        comm.all_reduce(t, accel::runtime::ReduceOp::kSum);
        const std::chrono::duration<double, std::milli> took =
            std::chrono::steady_clock::now() - start;
        if (i >= 0) ms.push_back(took.count());
      }
      std::sort(ms.begin(), ms.end());
      const double median = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
      std::printf(
          "BENCH {\"rank\":%d,\"numel\":%lld,\"bytes\":%lld,\"steps\":%d,"
          "\"allreduce_ms\":%.3f,\"transport\":\"%s\"}\n",
          comm.rank(), numel, numel * 4, steps, median, comm.all_reduce_transport().c_str());
      std::fflush(stdout);
    }
    comm.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
