// c10's CPU allocator interface: allocate() is const on 1.13 and not on 2.x, where copy_data must
// also be given. An allocator derives from this and implements allocate_bytes().
#pragma once

#include <c10/core/Allocator.h>

#include "compat/torch_version.hpp"

namespace accel::compat {

struct CpuAllocator : c10::Allocator {
  virtual c10::DataPtr allocate_bytes(size_t n) const = 0;
#if ACCEL_TORCH2
  c10::DataPtr allocate(size_t n) override {
    return allocate_bytes(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override {
    return allocate_bytes(n);
  }
#endif
};

}  // namespace accel::compat
