// Whole-string number parsing for option values ("3", "1e-3"): false for empty text, trailing
// characters, overflow or a non-finite value. Every option parser in libaccel goes through these.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace accel {

inline bool parse_int(const std::string& text, long long* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return false;
  *out = v;
  return true;
}

inline bool parse_real(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace accel
