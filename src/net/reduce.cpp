#include "net/reduce.hpp"

#include <algorithm>
#include <cstring>

namespace accel::net {

namespace {

// bfloat16 is the upper half of an fp32, rounded to nearest even (NaN stays NaN).
struct BF16 {
  uint16_t bits;
};
inline float to_float(BF16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline BF16 from_float(float f, BF16) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BF16{static_cast<uint16_t>(u >> 16)};
}
inline float to_float(_Float16 v) {
  return static_cast<float>(v);
}
inline _Float16 from_float(float f, _Float16) {
  return static_cast<_Float16>(f);
}

template <class T>
void combine_as(T* acc, const T* in, size_t n, Op op) {
  switch (op) {
    case Op::kSum:
      for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] + in[i]);
      break;
    case Op::kMax:
      for (size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
      break;
    case Op::kMin:
      for (size_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], in[i]);
      break;
  }
}

template <class T>
void combine_narrow(T* acc, const T* in, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) {
    const float a = to_float(acc[i]);
    const float b = to_float(in[i]);
    const float r = op == Op::kSum ? a + b : op == Op::kMax ? std::max(a, b) : std::min(a, b);
    acc[i] = from_float(r, T{});
  }
}

template <class T>
void average_as(T* acc, const T* in, size_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] + in[i]) / d;
}

template <class T>
void average_narrow(T* acc, const T* in, size_t n, int divisor) {
  // Rounded to the narrow type after the sum, as a sum followed by a division would be.
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i)
    acc[i] = from_float(to_float(from_float(to_float(acc[i]) + to_float(in[i]), T{})) / d, T{});
}

}  // namespace

size_t size_of(DType type) {
  switch (type) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kI8:
    case DType::kU8:
      return 1;
  }
  return 1;
}

bool is_floating(DType type) {
  return type == DType::kF32 || type == DType::kF64 || type == DType::kF16 || type == DType::kBF16;
}

void combine(void* acc, const void* in, size_t count, DType type, Op op) {
  switch (type) {
    case DType::kF32:
      return combine_as(static_cast<float*>(acc), static_cast<const float*>(in), count, op);
    case DType::kF64:
      return combine_as(static_cast<double*>(acc), static_cast<const double*>(in), count, op);
    case DType::kI8:
      return combine_as(static_cast<int8_t*>(acc), static_cast<const int8_t*>(in), count, op);
    case DType::kU8:
      return combine_as(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), count, op);
    case DType::kI16:
      return combine_as(static_cast<int16_t*>(acc), static_cast<const int16_t*>(in), count, op);
    case DType::kI32:
      return combine_as(static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), count, op);
    case DType::kI64:
      return combine_as(static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), count, op);
    case DType::kF16:
      return combine_narrow(static_cast<_Float16*>(acc), static_cast<const _Float16*>(in), count,
                            op);
    case DType::kBF16:
      return combine_narrow(static_cast<BF16*>(acc), static_cast<const BF16*>(in), count, op);
  }
}

void combine_average(void* acc, const void* in, size_t count, DType type, int divisor) {
  switch (type) {
    case DType::kF32:
      return average_as(static_cast<float*>(acc), static_cast<const float*>(in), count, divisor);
    case DType::kF64:
      return average_as(static_cast<double*>(acc), static_cast<const double*>(in), count, divisor);
    case DType::kF16:
      return average_narrow(static_cast<_Float16*>(acc), static_cast<const _Float16*>(in), count,
                            divisor);
    case DType::kBF16:
      return average_narrow(static_cast<BF16*>(acc), static_cast<const BF16*>(in), count, divisor);
    default:
      return combine(acc, in, count, type, Op::kSum);  // integer averages are refused before
  }
}

}  // namespace accel::net
