#include "runtime/block_cache.hpp"

#include <sys/mman.h>

#include <algorithm>

namespace accel::runtime {

BlockCache::~BlockCache() {
  for (auto& [size, blocks] : free_)
    for (const auto& b : blocks) munmap(b.p, size);
}

size_t BlockCache::size_class(size_t bytes) {
  size_t top = 1;
  while (top <= bytes / 2) top <<= 1;  // the highest power of two <= bytes
  const size_t grain = std::max<size_t>(size_t{64} << 10, top / 8);
  return (bytes + grain - 1) / grain * grain;
}

void* BlockCache::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back().p;
      it->second.pop_back();
      free_bytes_ -= size;
      in_use_[p] = size;
      return p;
    }
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    // Free blocks of other sizes hold memory (and address space, under RLIMIT_AS): give them
    // back and try once more before reporting no memory.
    release_free();
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_use_[p] = size;
  mapped_ += size;
  return p;
}

void BlockCache::release_free() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_to(0);
}

bool BlockCache::release(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = in_use_.find(p);
  if (it == in_use_.end()) return false;
  const size_t size = it->second;
  in_use_.erase(it);
  free_[size].push_back(Free{p, step_});
  free_bytes_ += size;
  if (free_bytes_ > kMaxFreeBytes) trim_to(kMaxFreeBytes);
  return true;
}

void BlockCache::end_of_step() {
  std::lock_guard<std::mutex> lock(mu_);
  // A block last given back kKeepSteps step ends ago or earlier, and not taken since, goes.
  for (auto it = free_.begin(); it != free_.end();) {
    auto& blocks = it->second;
    const auto stale = std::stable_partition(blocks.begin(), blocks.end(), [&](const Free& b) {
      return b.last_used + kKeepSteps <= step_;
    });
    for (auto b = blocks.begin(); b != stale; ++b) munmap(b->p, it->first);
    const size_t dropped = static_cast<size_t>(stale - blocks.begin());
    mapped_ -= dropped * it->first;
    free_bytes_ -= dropped * it->first;
    blocks.erase(blocks.begin(), stale);
    it = blocks.empty() ? free_.erase(it) : std::next(it);
  }
  ++step_;
}

void BlockCache::trim_to(size_t max_free) {
  while (free_bytes_ > max_free) {
    // The least recently used free block of any class.
    auto oldest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (!it->second.empty() && (oldest == free_.end() ||
                                  it->second.front().last_used < oldest->second.front().last_used))
        oldest = it;
    if (oldest == free_.end()) return;
    munmap(oldest->second.front().p, oldest->first);
    mapped_ -= oldest->first;
    free_bytes_ -= oldest->first;
    oldest->second.erase(oldest->second.begin());
    if (oldest->second.empty()) free_.erase(oldest);
  }
}

size_t BlockCache::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_;
}

size_t BlockCache::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

}  // namespace accel::runtime
