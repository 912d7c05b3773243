#include "common/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/error.hpp"

namespace accel {

void make_directories(const std::string& dir, mode_t mode) {
  if (dir.empty()) fail(Errc::invalid_argument, "no directory to create");
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    struct stat st {};
    if (stat(part.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        fail(Errc::io, "cannot create " + dir + ": " + part + " is not a directory");
    } else if (mkdir(part.c_str(), mode) != 0 && errno != EEXIST) {
      fail(Errc::io, sys_error("cannot create " + part +
                                   (part == dir ? std::string() : " (on the way to " + dir + ")"),
                               errno));
    }
    if (end == std::string::npos) break;
  }
}

std::string read_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(Errc::io, "'" + path + "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::io, "cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) fail(Errc::io, "error while reading '" + path + "'");
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(Errc::io, sys_error("cannot create '" + tmp + "'", errno));
  size_t done = 0;
  int err = 0;
  while (done < bytes.size() && err == 0) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno != EINTR) err = errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    fail(Errc::io, sys_error("cannot write '" + path + "'", err));
  }
}

}  // namespace accel
