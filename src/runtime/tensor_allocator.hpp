// libaccel's CPU allocator for LibTorch: tensors of 1 MiB and more from a BlockCache (sized by what
// a training step asks for, see block_cache.hpp), smaller ones from the allocator it replaces.
#pragma once

#include <string>

namespace accel::runtime {

// Installs it once per process (later calls change nothing); returns what it did, for the logs.
// Not under AddressSanitizer, whose checks of freed memory it would blind.
std::string install_tensor_allocator();
// The end of a training step (an optimizer step): free blocks the step did not use are unmapped.
void tensor_memory_step_ended();
// Gives every cached free block back to the system (Accelerate's clear_device_cache after an
// out-of-memory error).
void release_cached_tensor_memory();

}  // namespace accel::runtime
