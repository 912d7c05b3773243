// collectives_bench.cpp - libaccel's communicator's collectives on fp32 tensors of given element
// counts: all_reduce (the one gradient synchronisation is built on), all_gather, reduce_scatter,
// broadcast. The transport is the job's: shared memory on one machine unless
// ACCEL_SHARED_MEMORY_ALLREDUCE is false, libaccel's TCP ring, or Gloo with
// ACCEL_COLLECTIVE_TRANSPORT=gloo. Prints one JSON line per op and size on each rank (the median
// of --steps timed calls after two untimed ones):
//
//   BENCH {"op":"all_reduce","numel":10512394,"bytes":42049576,"ms":...,"transport":"tcp"}
//
// all_gather's bytes are each rank's part; the others' the whole tensor's.
//
//   accel launch -n 2 collectives_bench [--steps 10] --numel 269322,10512394
//                                       [--ops all_reduce,all_gather,reduce_scatter,broadcast]
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "runtime/communicator.hpp"
#include "runtime/process_place.hpp"

namespace {

std::vector<std::string> split(const char* text) {
  std::vector<std::string> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) out.push_back(item);
  return out;
}

double median_ms(int steps, const std::function<void()>& call) {
  std::vector<double> ms;
  for (int i = -2; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (i >= 0) ms.push_back(took.count());
  }
  std::sort(ms.begin(), ms.end());
  return steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  std::vector<long long> sizes;
  std::vector<std::string> ops{"all_reduce"};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--numel") && i + 1 < argc) {
      for (const auto& item : split(argv[++i])) sizes.push_back(std::atoll(item.c_str()));
    } else if (!std::strcmp(argv[i], "--ops") && i + 1 < argc) {
      ops = split(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
                   __FILE__);
      return 2;
    }
  }
  const std::vector<std::string> known{"all_reduce", "all_gather", "reduce_scatter", "broadcast"};
  if (steps < 1 || sizes.empty() ||
      std::any_of(sizes.begin(), sizes.end(), [](long long n) { return n < 1; }) ||
      std::any_of(ops.begin(), ops.end(), [&](const std::string& op) {
        return std::find(known.begin(), known.end(), op) == known.end();
      })) {
    std::fprintf(stderr,
                 "--steps must be at least 1, --numel a list of positive counts and --ops a list "
                 "of all_reduce, all_gather, reduce_scatter, broadcast\n");
    return 2;
  }
  try {
    const auto place = accel::runtime::read_process_place(accel::config::process_environment());
    accel::runtime::CommOptions options;
    const char* shm = std::getenv("ACCEL_SHARED_MEMORY_ALLREDUCE");
    options.shared_memory = !(shm && (!std::strcmp(shm, "0") || !std::strcmp(shm, "false")));
    const char* transport = std::getenv("ACCEL_COLLECTIVE_TRANSPORT");
    options.gloo = transport && !std::strcmp(transport, "gloo");
    accel::runtime::Communicator comm(place, options);
    for (const std::string& op : ops) {
      for (long long numel : sizes) {
        at::Tensor t = at::ones({numel}, at::kFloat);
        at::Tensor all = at::empty({numel * comm.size() * 4}, at::kByte);
        const std::vector<int64_t> bytes_of(static_cast<size_t>(comm.size()), numel * 4);
        const at::Tensor mine = t.view(at::kByte);
        const double ms = median_ms(steps, [&] {
          if (op == "all_reduce") comm.all_reduce(t, accel::runtime::ReduceOp::kSum);
          if (op == "all_gather") comm.all_gather_bytes(mine, bytes_of, all);
          if (op == "reduce_scatter") comm.reduce_scatter(t, /*average=*/false);
          if (op == "broadcast") comm.broadcast(t, 0);
        });
        std::printf(
            "BENCH {\"rank\":%d,\"op\":\"%s\",\"numel\":%lld,\"bytes\":%lld,\"steps\":%d,"
            "\"ms\":%.3f,\"transport\":\"%s\"}\n",
            comm.rank(), op.c_str(), numel, numel * 4, steps, ms,
            comm.all_reduce_transport().c_str());
        std::fflush(stdout);
      }
    }
    comm.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
