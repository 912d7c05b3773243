// libFuzzer target: the checkpoint manifest parser must reject or accept any text without crashing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/manifest.hpp"
#include "common/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    accel::checkpoint::parse_manifest(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const accel::Error&) {
  }
  return 0;
}
