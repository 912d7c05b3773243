// Seeds of every random generator libaccel knows: LibTorch's default CPU and CUDA generators and
// the library's own generator (data shuffling and other library-side randomness draw from it).
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>

namespace accel::runtime {

void seed_everything(uint64_t seed);

// libaccel's own CPU generator. Not thread-safe by itself: lock its mutex() while drawing.
at::Generator& library_generator();

}  // namespace accel::runtime
