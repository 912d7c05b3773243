// An append-only file whose every append reaches the kernel in one write(2) call: a process killed
// after append() returned loses nothing it appended (the page cache outlives the process). POSIX.
#pragma once

#include <string>

namespace accel::tracking {

class OutputFile {
 public:
  OutputFile() = default;
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // kNew: an existing file is an error; kAppend keeps and extends one; kReplace empties it.
  enum class Mode { kNew, kAppend, kReplace };
  // Creates or opens `path`. Throws accel::Error(io) naming the path and the reason.
  void open(const std::string& path, Mode mode = Mode::kNew);
  // Bytes in the file when it was opened (kAppend: 0 for a new file).
  long long size_at_open() const { return size_at_open_; }
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Throws accel::Error(io) naming the path (a full disk, a file size limit, ...).
  void append(const std::string& bytes);
  void close();

 private:
  int fd_ = -1;
  long long size_at_open_ = 0;
  std::string path_;
};

// Creates `dir` and its missing parents (mode 0755). Throws accel::Error(io) naming the directory
// that could not be made, and why.
void make_directories(const std::string& dir);

}  // namespace accel::tracking
