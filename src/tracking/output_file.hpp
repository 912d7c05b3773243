// An append-only file whose every append reaches the kernel in one write(2) call: a process killed
// after append() returned loses nothing it appended (the page cache outlives the process). POSIX.
#pragma once

#include <functional>
#include <string>

namespace accel::tracking {

class OutputFile {
 public:
  OutputFile() = default;
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // kNew: an existing file is an error; kReplace empties it; kAppend keeps and extends a file of
  // newline-ended records, first made whole: a last record without its newline (a writer killed
  // mid-append) is moved aside into `<path>.torn-<n>` (torn_kept_in), so that the first append
  // does not glue onto it.
  enum class Mode { kNew, kAppend, kReplace };
  // Creates or opens `path`. Throws accel::Error(io) naming the path and the reason.
  void open(const std::string& path, Mode mode = Mode::kNew);
  // Bytes in the file when it was opened, after a torn record was moved aside (kAppend: 0 for a
  // new file).
  long long size_at_open() const { return size_at_open_; }
  // kAppend: the file the torn last record went to, and how many bytes it had; empty when the
  // file was whole.
  const std::string& torn_kept_in() const { return torn_kept_in_; }
  long long torn_bytes() const { return torn_bytes_; }
  // The warning a caller gives for a torn record moved aside; empty when there was none.
  std::string torn_notice() const;
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Throws accel::Error(io) naming the path (a full disk, a file size limit, ...).
  void append(const std::string& bytes);
  void close();
  // kAppend files: rewrites the file with only the lines `keep` accepts (newline-ended records),
  // through a temporary and a rename, and reopens it for appending. Throws accel::Error(io).
  void keep_lines(const std::function<bool(const std::string& line)>& keep);

 private:
  void cut_torn_tail();
  int fd_ = -1;
  long long size_at_open_ = 0;
  std::string path_;
  std::string torn_kept_in_;
  long long torn_bytes_ = 0;
};

// Creates `dir` and its missing parents (mode 0755). Throws accel::Error(io) naming the directory
// that could not be made, and why.
void make_directories(const std::string& dir);

}  // namespace accel::tracking
