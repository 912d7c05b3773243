// CRC32C (Castagnoli), the checksum of TensorBoard's record framing, and the mask TensorFlow puts
// over stored checksums (so that a CRC of data holding CRCs stays well distributed). Pure.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accel::tracking {

// CRC32C of `size` bytes at `data` (reflected polynomial 0x82F63B78, initial and final xor ~0).
uint32_t crc32c(const void* data, size_t size);

// ((crc >> 15) | (crc << 17)) + 0xa282ead8, as TensorFlow's record writer stores checksums.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace accel::tracking
