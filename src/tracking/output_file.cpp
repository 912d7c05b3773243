#include "tracking/output_file.hpp"

#include <fstream>
#include <iterator>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.hpp"
#include "common/files.hpp"

namespace accel::tracking {
namespace {

constexpr size_t kChunk = 64 * 1024;

// Reads up to `size` bytes at `offset`; throws accel::Error(io) naming `path`.
size_t read_at(int fd, char* into, size_t size, long long offset, const std::string& path) {
  for (;;) {
    const ssize_t n = ::pread(fd, into, size, offset);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) fail(Errc::io, sys_error("cannot read " + path, errno));
  }
}

void write_all(int fd, const char* bytes, size_t size, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Errc::io, sys_error("cannot write " + path, errno));
    done += static_cast<size_t>(n);
  }
}

// Offset just past the last newline before `size` (0 when there is none).
long long end_of_last_line(int fd, long long size, const std::string& path) {
  std::vector<char> buf(kChunk);
  for (long long end = size; end > 0;) {
    const long long begin = end > static_cast<long long>(kChunk) ? end - kChunk : 0;
    const size_t got = read_at(fd, buf.data(), static_cast<size_t>(end - begin), begin, path);
    for (size_t i = got; i > 0; --i)
      if (buf[i - 1] == '\n') return begin + static_cast<long long>(i);
    end = begin;
  }
  return 0;
}

// A new file `<path>.torn-<n>`, the first n free; its descriptor and name.
int create_aside(const std::string& path, std::string* name) {
  for (int n = 1;; ++n) {
    *name = path + ".torn-" + std::to_string(n);
    const int fd = ::open(name->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) fail(Errc::io, sys_error("cannot create " + *name, errno));
  }
}

}  // namespace

OutputFile::~OutputFile() {
  close();
}

void OutputFile::open(const std::string& path, Mode mode) {
  close();
  // kAppend reads its own tail (pread) before it appends.
  const int flags = O_CREAT | O_CLOEXEC |
                    (mode == Mode::kNew      ? O_WRONLY | O_EXCL
                     : mode == Mode::kAppend ? O_RDWR | O_APPEND
                                             : O_WRONLY | O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) fail(Errc::io, "cannot create " + path + ": " + std::strerror(errno));
  fd_ = fd;
  path_ = path;
  torn_kept_in_.clear();
  torn_bytes_ = 0;
  if (mode == Mode::kAppend) {
    try {
      cut_torn_tail();
    } catch (...) {
      close();
      throw;
    }
  }
  struct stat st {};
  size_at_open_ = ::fstat(fd_, &st) == 0 ? static_cast<long long>(st.st_size) : 0;
}

// The copy is made before the cut: a process killed between the two leaves the torn bytes in
// both places, and the next open moves them aside again; nothing is lost either way.
void OutputFile::cut_torn_tail() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(Errc::io, sys_error("cannot stat " + path_, errno));
  const long long size = st.st_size;
  if (size == 0) return;
  const long long cut = end_of_last_line(fd_, size, path_);
  if (cut == size) return;
  std::string aside;
  const int out = create_aside(path_, &aside);
  try {
    std::vector<char> buf(kChunk);
    for (long long at = cut; at < size;) {
      const size_t want = static_cast<size_t>(std::min<long long>(size - at, kChunk));
      const size_t got = read_at(fd_, buf.data(), want, at, path_);
      if (got == 0) break;  // shrunk meanwhile: what is left is cut below all the same
      write_all(out, buf.data(), got, aside);
      at += static_cast<long long>(got);
    }
  } catch (...) {
    ::close(out);
    throw;
  }
  ::close(out);
  if (::ftruncate(fd_, cut) != 0)
    fail(Errc::io, sys_error("cannot cut the torn last record off " + path_, errno));
  torn_kept_in_ = aside;
  torn_bytes_ = size - cut;
}

std::string OutputFile::torn_notice() const {
  if (torn_kept_in_.empty()) return "";
  return path_ + " ended in a record cut short (" + std::to_string(torn_bytes_) +
         " bytes without a newline: a writer killed mid-record); moved to " + torn_kept_in_ +
         ", the run appends after the last whole record";
}

void OutputFile::append(const std::string& bytes) {
  if (fd_ < 0) fail(Errc::state, "the tracker's file " + path_ + " is closed");
  write_all(fd_, bytes.data(), bytes.size(), path_);
}

void OutputFile::keep_lines(const std::function<bool(const std::string&)>& keep) {
  const std::string path = path_;
  close();
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(Errc::io, "cannot read " + path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string kept;
  for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = text.substr(start, nl - start);
    if (keep(line)) kept += line + "\n";
  }
  {
    OutputFile tmp;
    tmp.open(path + ".resume-tmp", Mode::kReplace);
    tmp.append(kept);
    if (::fsync(tmp.fd_) != 0) fail(Errc::io, sys_error("cannot sync " + path, errno));
  }
  if (::rename((path + ".resume-tmp").c_str(), path.c_str()) != 0)
    fail(Errc::io, sys_error("cannot replace " + path, errno));
  open(path, Mode::kAppend);
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
