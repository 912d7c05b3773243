// Bytes from the kernel's random source (getrandom): the job token, the handshakes' nonces, the
// collectives' session value. Errc::io when it fails.
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "common/error.hpp"

namespace accel::security {

inline void random_bytes(uint8_t* out, size_t size) {
  for (size_t got = 0; got < size;) {
    const ssize_t n = getrandom(out + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(Errc::io, sys_error("cannot draw random bytes: getrandom", errno));
    got += static_cast<size_t>(n);
  }
}

}  // namespace accel::security
