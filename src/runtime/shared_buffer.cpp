#include "runtime/shared_buffer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.hpp"

namespace accel::runtime {

namespace {}  // namespace

SharedBuffer SharedBuffer::map(int fd, const std::string& name, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) fail(Errc::io, sys_error("mmap of shared buffer " + name, err));
  SharedBuffer b;
  b.data_ = static_cast<unsigned char*>(p);
  b.bytes_ = bytes;
  return b;
}

SharedBuffer SharedBuffer::create(const std::string& name, size_t bytes) {
  if (bytes == 0) fail(Errc::invalid_argument, "a shared buffer of 0 bytes");
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail(Errc::io, sys_error("shm_open(" + name + ")", errno));
  int err = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (err == 0) err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    fail(Errc::io,
         sys_error("reserving " + std::to_string(bytes >> 20) + " MiB in /dev/shm for " + name,
                   err));
  }
  try {
    return map(fd, name, bytes);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

SharedBuffer SharedBuffer::attach(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) fail(Errc::io, sys_error("shm_open(" + name + ")", errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    fail(Errc::io, "shared buffer " + name + " has an unexpected size");
  }
  return map(fd, name, bytes);
}

void SharedBuffer::unlink(const std::string& name) {
  shm_unlink(name.c_str());
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept {
  *this = std::move(other);
}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

SharedBuffer::~SharedBuffer() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

}  // namespace accel::runtime
