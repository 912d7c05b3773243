// IDX files (the MNIST family), plain or gzip-compressed: the header, and the data decoded into
// memory the caller provides. Pure logic (zlib, no LibTorch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accel::data {

struct IdxLayout {
  uint8_t type_code =
      0;             // 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
  size_t width = 0;  // bytes per element
  std::vector<int64_t> shape;
  size_t header_bytes = 0;  // 4 + 4 per dimension
  size_t data_bytes = 0;
  bool compressed = false;  // gzip
};

// Reads `path`'s header (inflating only its first bytes). Throws accel::Error(io) naming the file:
// missing or unreadable, not an IDX file, a truncated header, an implausible shape.
IdxLayout read_idx_layout(const std::string& path);

// Receives decoded data in order, in chunks of whole values.
using ByteSink = std::function<void(const unsigned char* data, size_t size)>;

// Decodes `path`'s data (layout.data_bytes of it) into `sink`, values turned from the file's
// big-endian order into this machine's. Throws accel::Error(io) naming the file when it holds fewer
// bytes than its header promises, its compressed data is corrupt, or it cannot be read.
void decode_idx(const std::string& path, const IdxLayout& layout, const ByteSink& sink);

}  // namespace accel::data
