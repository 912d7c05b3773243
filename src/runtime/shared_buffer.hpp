// Memory one rank owns and every rank on its machine maps: a named object under /dev/shm, its
// pages reserved when it is made (a full /dev/shm is an error then, not a SIGBUS on first touch).
// The name is removed once every rank has mapped it; the mappings outlive it.
#pragma once

#include <cstddef>
#include <string>

namespace accel::runtime {

class SharedBuffer {
 public:
  // Makes `bytes` (zero-filled) under an unused `name`. Throws accel::Error(io) saying why not.
  static SharedBuffer create(const std::string& name, size_t bytes);
  // Maps another rank's buffer of `bytes`. Throws accel::Error(io).
  static SharedBuffer attach(const std::string& name, size_t bytes);
  static void unlink(const std::string& name);

  SharedBuffer() = default;
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer();

  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  static SharedBuffer map(int fd, const std::string& name, size_t bytes);

  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace accel::runtime
