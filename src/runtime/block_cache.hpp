// Memory for large tensors, mapped per block and kept by size class once freed, for the next
// request of that class. A training step asks for the same sizes every step, so after the first
// step nothing is mapped or faulted in again; and what is kept is what the recent steps used: a
// free block that kKeepSteps step ends in a row saw unused is unmapped (more than one, so that a
// step of several optimizers, each ending a step, keeps what each part of it needs). glibc's heap,
// by contrast, must either return such blocks to the kernel (and fault them in again each step) or
// keep them in a heap that fragments. Pure logic (POSIX), thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace accel::runtime {

class BlockCache {
 public:
  // Smaller requests are not this cache's (the caller serves them).
  static constexpr size_t kMinBytes = size_t{1} << 20;
  // Free blocks kept at most, whatever the steps say (when no step ever ends, say).
  static constexpr size_t kMaxFreeBytes = size_t{1} << 30;
  static constexpr uint64_t kKeepSteps = 4;

  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache();

  // The size a request is served with: rounded up by at most 1/8 (and to 64 KiB), so that requests
  // of nearly the same size share blocks.
  static size_t size_class(size_t bytes);

  // A block of at least `bytes` (>= kMinBytes), page-aligned; nullptr when the kernel has no
  // memory.
  void* allocate(size_t bytes);
  // Takes back a block of this cache's and returns true; false for any other pointer.
  bool release(void* p);
  // The end of a training step: unmaps the free blocks no request took in the last kKeepSteps.
  void end_of_step();
  // Unmaps every free block (after an out-of-memory error).
  void release_free();

  size_t mapped_bytes() const;
  size_t free_bytes() const;

 private:
  struct Free {
    void* p;
    uint64_t last_used;
  };
  void trim_to(size_t max_free);  // unmaps the least recently used free blocks

  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> in_use_;  // block -> its size class
  std::map<size_t, std::vector<Free>> free_;  // size class -> free blocks, most recent last
  size_t mapped_ = 0, free_bytes_ = 0;
  uint64_t step_ = 0;
};

}  // namespace accel::runtime
