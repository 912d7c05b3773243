// The safetensors format: 8-byte little-endian header length, a JSON header (per tensor: dtype,
// shape, data_offsets; optionally __metadata__ of strings), then the raw little-endian data.
// The header parser is pure (no LibTorch) and checks every bound: it is fuzzed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace accel::checkpoint {

struct TensorEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct Header {
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Bytes per element of a safetensors dtype name, 0 when unknown.
size_t dtype_size(const std::string& dtype);

// Parses and validates the header of a file of `file_size` bytes whose first bytes are `prefix`
// (at least min(file_size, 8 + header length) bytes). Throws accel::Error(io) naming `name`: a
// header length past the file or over 100 MB, invalid JSON, an unknown dtype, offsets out of range,
// not contiguous or overlapping, a size that disagrees with dtype x shape, or data after the last
// tensor.
Header parse_header(const uint8_t* prefix, size_t prefix_size, uint64_t file_size,
                    const std::string& name);

// The header bytes (length + JSON, padded with spaces to a multiple of 8) for `tensors`, whose
// offsets the function assigns in order.
std::string make_header(std::vector<TensorEntry>& tensors,
                        const std::map<std::string, std::string>& metadata);

// "10GB", "500MB", "1GiB", "100kB", "12345" -> bytes, as Accelerate's max_shard_size (decimal
// units, binary with "i"). Throws accel::Error(invalid_argument) otherwise.
uint64_t parse_size(const std::string& text);

}  // namespace accel::checkpoint
