// The element-wise arithmetic of libaccel's TCP collectives: combining a received part into this
// rank's, and the average's division in the same pass. Pure logic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accel::net {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI8, kU8, kI16, kI32, kI64 };
enum class Op : uint8_t { kSum, kMax, kMin };

size_t size_of(DType type);
bool is_floating(DType type);

// acc[i] = acc[i] op in[i], for `count` elements. Half-width floats are combined in fp32 and
// rounded back, as LibTorch's CPU kernels do.
void combine(void* acc, const void* in, size_t count, DType type, Op op);
// acc[i] = (acc[i] + in[i]) / divisor, for floating types, in one pass: the last step of an
// averaging reduction (bitwise what a sum and then a division give).
void combine_average(void* acc, const void* in, size_t count, DType type, int divisor);

}  // namespace accel::net
