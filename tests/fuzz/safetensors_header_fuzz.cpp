// libFuzzer target: the safetensors header parser must reject or accept any bytes without reading
// out of bounds. Built by tests/fuzz/run_fuzzers.sh when clang is available.
#include <cstddef>
#include <cstdint>

#include "checkpoint/safetensors.hpp"
#include "common/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // The whole input is the file; a declared file size larger than the prefix is also tried.
    accel::checkpoint::parse_header(data, size, size, "fuzz");
    if (size >= 8) accel::checkpoint::parse_header(data, size, size + 64, "fuzz");
  } catch (const accel::Error&) {
  }
  return 0;
}
