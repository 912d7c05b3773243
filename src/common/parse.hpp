// Whole-string number parsing for option values ("3", "1e-3") and the matching formatting: false
// for empty text, trailing characters, overflow or a non-finite value. Every option parser in
// libaccel goes through these.
//
// None of this depends on the C locale (LC_NUMERIC) or the global C++ locale: libaccel runs inside
// Julia, Go, Rust and C++ programs that may have called setlocale(LC_ALL, "de_DE.UTF-8") or
// std::locale::global(...), and there strtod("0.5") stops at the '.' (std::stod returns 0) and
// printf/ostream write "0,5". std::from_chars and std::to_chars always use '.' and no grouping.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>

namespace accel {

namespace detail {

// from_chars reads the C locale's number syntax minus what strtod added in front: no leading
// whitespace and no '+'. A single '+' is accepted ("+1e-3" was valid before and is what users
// write); "+-1" is not. Whitespace is not accepted anywhere: the text must be the number, and
// configuration values are trimmed before they get here (config::normalize).
inline const char* number_start(const std::string& text) {
  const char* first = text.data();
  if (text.size() >= 2 && first[0] == '+' && first[1] != '-') ++first;
  return first;
}

template <class T>
bool parse_whole(const std::string& text, T* out) {
  if (text.empty()) return false;
  const char* last = text.data() + text.size();
  T v{};
  const auto [end, ec] = std::from_chars(number_start(text), last, v);
  if (ec != std::errc() || end != last) return false;
  *out = v;
  return true;
}

}  // namespace detail

// A decimal integer: optional '+' or '-', then digits.
inline bool parse_int(const std::string& text, long long* out) {
  return detail::parse_whole(text, out);
}

// A decimal integer without a '-' (64-bit tokens and the like).
inline bool parse_uint(const std::string& text, std::uint64_t* out) {
  return detail::parse_whole(text, out);
}

// A finite decimal number as strtod reads it in the "C" locale ("0.01", "1e-3", ".5", "+2.5"),
// except hexadecimal floats, "inf" and "nan". False when it overflows or underflows to zero
// (from_chars's result_out_of_range); subnormal values are accepted.
inline bool parse_real(const std::string& text, double* out) {
  double v = 0;
  if (!detail::parse_whole(text, &v) || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// The shortest text that parse_real reads back as exactly `v`: "0.1", "1e-05", "120", "-0.5".
inline std::string format_real(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return std::string();  // cannot happen: 64 bytes hold any double
  return std::string(buf, end);
}

}  // namespace accel
