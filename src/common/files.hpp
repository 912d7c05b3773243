// Directories made as os.makedirs(exist_ok=True) makes them. Pure logic (POSIX).
#pragma once

#include <sys/types.h>

#include <string>

namespace accel {

// `dir` and the directories above it that are missing, new ones with `mode` (less the umask).
// Throws accel::Error(io) naming the part that is not a directory or could not be made.
void make_directories(const std::string& dir, mode_t mode);

}  // namespace accel
