// Text spellings shared by the JSON-lines, CSV and YAML files the trackers write. Pure.
#pragma once

#include <string>

namespace accel::tracking {

// The shortest decimal that reads back as `v` ("0.1", "64", "1e-08"); NaN and the infinities as
// `nan`, `inf`, `-inf` (Python's float(), pandas and R read these).
std::string number_text(double v);

// As number_text, but NaN and the infinities as Python's json module writes and reads them
// (NaN, Infinity, -Infinity): JSON itself has no spelling for them.
std::string json_number(double v);

// `s` as a JSON string literal (quotes, backslash escapes, control characters as \u00XX).
std::string json_string(const std::string& s);

// `s` as one CSV field (RFC 4180): as it is, or quoted with "" for " when it holds a comma, quote,
// CR or LF, or starts or ends with a space.
std::string csv_field(const std::string& s);

}  // namespace accel::tracking
