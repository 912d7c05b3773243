// What the collectives need to know about the data loaders in use: which loader is iterating (the
// innermost), whether it is on its last batch and how many samples of that batch are real. The
// accelerator and its loaders share one; Accelerate keeps the same in its GradientState.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace accel::runtime {

class GradientState {
 public:
  struct LoaderState {
    const void* loader;
    bool end_of_dataloader;
    int64_t remainder;  // -1 when unknown or nothing was padded
  };

  // A loader starts an iteration (pushed) or ends/abandons one (removed wherever it is).
  void begin(const void* loader, int64_t remainder) {
    std::lock_guard<std::mutex> lock(mutex_);
    remove_locked(loader);
    stack_.push_back({loader, false, remainder});
  }
  void end(const void* loader) {
    std::lock_guard<std::mutex> lock(mutex_);
    remove_locked(loader);
  }
  void set_end_of_dataloader(const void* loader, bool value) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : stack_)
      if (s.loader == loader) s.end_of_dataloader = value;
  }
  // A stream learns its remainder only at its last batch.
  void set_remainder(const void* loader, int64_t remainder) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : stack_)
      if (s.loader == loader) s.remainder = remainder;
  }
  std::optional<LoaderState> active() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stack_.empty()) return std::nullopt;
    return stack_.back();
  }

 private:
  void remove_locked(const void* loader) {
    for (auto it = stack_.begin(); it != stack_.end();)
      it = it->loader == loader ? stack_.erase(it) : it + 1;
  }
  mutable std::mutex mutex_;
  std::vector<LoaderState> stack_;
};

}  // namespace accel::runtime
