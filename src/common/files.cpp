#include "common/files.hpp"

#include <sys/stat.h>

#include <cerrno>
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

}  // namespace accel
