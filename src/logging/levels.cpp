#include "logging/levels.hpp"

#include <cctype>

#include "common/error.hpp"

namespace accel::logging {

namespace {

struct Named {
  const char* name;
  int32_t level;
};
constexpr Named kNames[] = {{"NOTSET", kNotset},   {"DEBUG", kDebug}, {"INFO", kInfo},
                            {"WARNING", kWarning}, {"ERROR", kError}, {"CRITICAL", kCritical}};

}  // namespace

int32_t level_from_name(const std::string& name) {
  std::string upper;
  for (unsigned char c : name) upper += static_cast<char>(std::toupper(c));
  for (const Named& n : kNames)
    if (upper == n.name) return n.level;
  fail(Errc::config,
       "unknown log level '" + name + "'; allowed: notset, debug, info, warning, error, critical");
}

std::string level_name(int32_t level) {
  for (const Named& n : kNames)
    if (level == n.level) return n.name;
  return "Level " + std::to_string(level);
}

std::string stderr_line(int32_t level, int32_t rank, int32_t world_size, bool all_processes,
                        const std::string& message) {
  std::string line = level_name(level);
  if (all_processes && world_size > 1)
    line += " [rank " + std::to_string(rank) + "/" + std::to_string(world_size) + "]";
  line += ": ";
  line += message;
  line += '\n';
  return line;
}

}  // namespace accel::logging
