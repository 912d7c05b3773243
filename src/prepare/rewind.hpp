// What one try of find_executable_batch_size may change and must give back when it runs out of
// memory: the random generators' states, the prepared models' gradients, the prepared
// dataloaders' positions and the accumulation counters.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace accel::prepare {

class Session;

class Rewind {
 public:
  // Takes the snapshot: gradients are copied (a parameter without one is remembered as such).
  explicit Rewind(Session& session);
  // Puts everything back as it was when the snapshot was taken.
  void restore();

 private:
  Session& session_;
  std::vector<std::pair<at::Generator, at::Tensor>> generators_;
  std::vector<std::pair<at::Tensor, at::Tensor>> gradients_;  // (parameter, copy or undefined)
  std::vector<std::pair<int64_t, int64_t>> positions_;        // by prepared dataloader
  int64_t micro_step_ = 0, total_steps_ = 0;
  bool sync_ = true;
};

}  // namespace accel::prepare
