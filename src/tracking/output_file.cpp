#include "tracking/output_file.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.hpp"
#include "common/files.hpp"

namespace accel::tracking {

OutputFile::~OutputFile() {
  close();
}

void OutputFile::open(const std::string& path, Mode mode) {
  close();
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC |
                    (mode == Mode::kNew      ? O_EXCL
                     : mode == Mode::kAppend ? O_APPEND
                                             : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) fail(Errc::io, "cannot create " + path + ": " + std::strerror(errno));
  struct stat st {};
  size_at_open_ = ::fstat(fd, &st) == 0 ? static_cast<long long>(st.st_size) : 0;
  fd_ = fd;
  path_ = path;
}

void OutputFile::append(const std::string& bytes) {
  if (fd_ < 0) fail(Errc::state, "the tracker's file " + path_ + " is closed");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Errc::io, "cannot write " + path_ + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

void OutputFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void make_directories(const std::string& dir) {
  if (dir.empty()) return;
  accel::make_directories(dir, 0755);
  // An existing directory may still refuse files (read-only, another owner): say so now, before
  // the run trains, rather than at the first log.
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(Errc::io, "cannot write in " + dir + ": " + std::strerror(errno));
}

}  // namespace accel::tracking
