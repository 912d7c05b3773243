// The logger's levels and the line the default sink writes (accel.h, "Logging"). Pure logic: no
// LibTorch, no runtime.
#pragma once

#include <cstdint>
#include <string>

namespace accel::logging {

constexpr int32_t kNotset = 0, kDebug = 10, kInfo = 20, kWarning = 30, kError = 40, kCritical = 50;
// The highest level a program may give; Python's logging takes any int, ours stays readable.
constexpr int32_t kMaxLevel = 1000;

// The level a `log_level` setting names (notset, debug, info, warning, error, critical; any
// case). Throws accel::Error (config) for another name.
int32_t level_from_name(const std::string& name);

// Python's getLevelName: "INFO", "WARNING", ..., "Level 25" for a number without a name.
std::string level_name(int32_t level);

// The default sink's line, newline included: "INFO: message", or "INFO [rank 1/2]: message" for
// a message every process writes in a job of more than one.
std::string stderr_line(int32_t level, int32_t rank, int32_t world_size, bool all_processes,
                        const std::string& message);

}  // namespace accel::logging
