// Directories made as os.makedirs(exist_ok=True) makes them, and whole files read. Pure logic
// (POSIX).
#pragma once

#include <sys/types.h>

#include <string>

namespace accel {

// `dir` and the directories above it that are missing, new ones with `mode` (less the umask).
// Throws accel::Error(io) naming the part that is not a directory or could not be made.
void make_directories(const std::string& dir, mode_t mode);

// The whole contents of the regular file `path`, as bytes. Throws accel::Error(io) when it is not
// a regular file (a directory, a FIFO that would block) or cannot be read.
std::string read_file(const std::string& path);

// Replaces `path` with `bytes` whole: written to a temporary file beside it, synced, renamed over
// it, so that a reader never sees half a file. Throws accel::Error(io) naming the path and why.
void write_file(const std::string& path, const std::string& bytes);

}  // namespace accel
