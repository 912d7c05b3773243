#include "trainer/python_json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace accel::trainer {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";  // json.dumps' spelling (allow_nan=True)
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  // Shortest round-trip digits in scientific form: "-1.2345e-05".
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string s(buf, r.ptr);
  const size_t e = s.find('e');
  const bool neg = s[0] == '-';
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  const int exp10 = std::atoi(s.c_str() + e + 1);
  std::string out = neg ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {  // repr's switch to exponent notation
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + ex;
  }
  if (exp10 < 0) return out + "0." + std::string(-exp10 - 1, '0') + digits;
  const size_t int_len = static_cast<size_t>(exp10) + 1;
  if (digits.size() <= int_len)
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

double python_round4(double v) {
  if (!std::isfinite(v)) return v;
  // to_chars rounds the exact binary value, as Python's round does; no locale is involved.
  char buf[512];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 4);
  double out = v;
  std::from_chars(buf, r.ptr, out);
  return out;
}

namespace {

// json.dumps' ensure_ascii escaping of a UTF-8 string.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xF0)
      cp = c & 0x07, len = 4;
    else if (c >= 0xE0)
      cp = c & 0x0F, len = 3;
    else if (c >= 0xC0)
      cp = c & 0x1F, len = 2;
    for (size_t k = 1; k < len && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += len;
    char u[16];
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
    }
    if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      out += u;
    } else {
      std::snprintf(u, sizeof u, "\\u%04x", cp);
      out += u;
    }
  }
  return out + "\"";
}

void dump(const nlohmann::json& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent + 2), ' '),
      close(static_cast<size_t>(indent), ' ');
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      out += "{\n";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {  // nlohmann's map: byte order = code points
        out += (first ? "" : ",\n") + pad + quote(it.key()) + ": ";
        dump(it.value(), indent + 2, out);
        first = false;
      }
      out += "\n" + close + "}";
      return;
    }
    case nlohmann::json::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return;
      }
      out += "[\n";
      for (size_t i = 0; i < v.size(); ++i) {
        out += (i ? ",\n" : "") + pad;
        dump(v[i], indent + 2, out);
      }
      out += "\n" + close + "]";
      return;
    }
    case nlohmann::json::value_t::string:
      out += quote(v.get<std::string>());
      return;
    case nlohmann::json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case nlohmann::json::value_t::number_float:
      out += python_float_repr(v.get<double>());
      return;
    case nlohmann::json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      return;
    case nlohmann::json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      return;
    default:
      out += "null";
      return;
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::json& value) {
  std::string out;
  dump(value, 0, out);
  return out;
}

}  // namespace accel::trainer
