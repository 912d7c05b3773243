#include "runtime/tensor_allocator.hpp"

#include <c10/core/CPUAllocator.h>

#include <mutex>

#include "compat/cpu_allocator.hpp"
#include "runtime/block_cache.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ACCEL_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ACCEL_UNDER_ASAN 1
#endif
#endif

namespace accel::runtime {

namespace {

// Both live for the whole process: tensors may be freed during static destruction.
BlockCache& cache() {
  static auto* c = new BlockCache();
  return *c;
}
c10::Allocator* g_previous = nullptr;

// One deleter for every pointer this allocator gave: the cache's blocks go back to it, anything
// else (a small block, through raw_deallocate) to the allocator it came from.
void release(void* p) {
  if (p && !cache().release(p)) g_previous->raw_deleter()(p);
}

struct StepAllocator final : compat::CpuAllocator {
  c10::DataPtr allocate_bytes(size_t n) const override {
    if (n >= BlockCache::kMinBytes)
      if (void* p = cache().allocate(n)) return {p, p, &release, c10::Device(c10::kCPU)};
    return g_previous->allocate(n);  // small, or no memory (its error then says so)
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_previous->raw_deleter() ? &release : nullptr;
  }
};

}  // namespace

std::string install_tensor_allocator() {
#ifdef ACCEL_UNDER_ASAN
  return "LibTorch's own (AddressSanitizer build)";
#else
  static std::once_flag once;
  static std::string what;
  std::call_once(once, [] {
    g_previous = c10::GetCPUAllocator();
    static auto* mine = new StepAllocator();
    c10::SetCPUAllocator(mine, /*priority=*/1);
    what = c10::GetCPUAllocator() == mine
               ? "tensors of 1 MiB and more from libaccel's per-step block cache"
               : "LibTorch's own (another allocator has priority)";
  });
  return what;
#endif
}

void tensor_memory_step_ended() {
#ifndef ACCEL_UNDER_ASAN
  cache().end_of_step();
#endif
}

void release_cached_tensor_memory() {
#ifndef ACCEL_UNDER_ASAN
  cache().release_free();
#endif
}

}  // namespace accel::runtime
