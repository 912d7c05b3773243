// The "param NAME v1 v2 ..." lines rank programs print and mp_test's params_of reads: each value
// to 9 significant digits, which a float survives exactly.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

inline void print_param_line(const std::string& name, const std::vector<float>& values) {
  std::string line = "param " + name;
  char text[32];
  for (float v : values) {
    std::snprintf(text, sizeof text, " %.9g", static_cast<double>(v));
    line += text;
  }
  std::printf("%s\n", line.c_str());
}
