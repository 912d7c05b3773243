// The one exception type of libaccel's C++ core. Each carries the error class that the C ABI turns
// into an accel_status; the numeric values match accel.h (checked by static_asserts in src/capi).
#pragma once

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace accel {

enum class Errc : int {
  invalid_argument = 1,
  wrong_handle = 2,
  config = 3,
  unsupported = 4,
  io = 5,
  shape = 6,
  dtype = 7,
  rendezvous = 8,
  timeout = 9,
  peer_failed = 10,
  state = 11,
  buffer_too_small = 12,
  callback = 13,
  out_of_memory = 14,
  torch = 15,
  internal = 16,
  cancelled = 17,
};

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

[[noreturn]] inline void fail(Errc code, const std::string& message) {
  throw Error(code, message);
}

// Whether LibTorch's (or a device's) error message says memory ran out: the statements
// Accelerate's should_reduce_batch_size looks for (CUDA/HIP/XPU, MPS, cuDNN, CPU).
inline bool is_out_of_memory_message(const char* message) {
  // " out of memory." also covers CUDA's "CUDA out of memory. Tried to allocate ...".
  for (const char* s :
       {" out of memory.", "MPS backend out of memory", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
        "DefaultCPUAllocator: can't allocate memory"})
    if (std::strstr(message, s)) return true;
  return false;
}

// "what: <the system's words for err>", for messages about failed system calls.
inline std::string sys_error(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// An accel::Error raised inside a TorchScript op (ZeRO stage 3's gathers) reaches the op's caller
// as the interpreter's own RuntimeError; the op keeps it here, per thread, so that the caller can
// report it with its code (take_op_error: the last one, once).
inline std::unique_ptr<Error>& op_error_slot() {
  thread_local std::unique_ptr<Error> slot;
  return slot;
}
inline void remember_op_error(const Error& e) {
  op_error_slot() = std::make_unique<Error>(e);
}
inline std::unique_ptr<Error> take_op_error() {
  return std::move(op_error_slot());
}

}  // namespace accel
