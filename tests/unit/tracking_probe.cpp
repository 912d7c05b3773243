// Writes one run with every file tracker (log_with "all") for tests/unit/tracker_readback.py, which
// reads it back with TensorBoard's own reader, Python's json and csv modules:
//   tracking_probe DIR
// Run: config {lr 0.001, model "cnn", batch_size 64}; steps 0..9 log loss = 1 / (step + 1) and
// accuracy = step / 10; step 10 logs loss NaN, grad_norm +inf, lr -inf and the text note "done,
// ok".
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.hpp"
#include "tracking/tracker.hpp"

using namespace accel::tracking;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    auto trackers = make_file_trackers("all", argv[1], {});
    const Values config = {
        {"lr", false, 0.001, ""}, {"model", true, 0, "cnn"}, {"batch_size", false, 64, ""}};
    for (auto& t : trackers) t->start("project", config);
    for (int step = 0; step < 10; ++step) {
      const Values v = {{"loss", false, 1.0 / (step + 1), ""},
                        {"accuracy", false, step / 10.0, ""}};
      for (auto& t : trackers) t->log(v, step, wall_clock_now());
    }
    const double inf = std::numeric_limits<double>::infinity();
    const Values last = {{"loss", false, std::nan(""), ""},
                         {"grad_norm", false, inf, ""},
                         {"lr", false, -inf, ""},
                         {"note", true, 0, "done, ok"}};
    for (auto& t : trackers) t->log(last, 10, wall_clock_now());
    for (auto& t : trackers) t->finish();
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "tracking_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
