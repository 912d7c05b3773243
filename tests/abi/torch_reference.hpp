// PyTorch as the reference of the C-interface tests: Debian's python3-torch (the same 1.13 as the
// library) runs a script and the numbers it prints come back.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

// Runs `code` after "import torch" and returns every number it prints, in order.
inline std::vector<double> python_numbers(const std::string& code) {
  // ctest runs each test as its own process, two at a time: the script name must be unique.
  static int calls = 0;
  const std::string path = ::testing::TempDir() + "ref_" + std::to_string(getpid()) + "_" +
                           std::to_string(calls++) + ".py";
  FILE* f = fopen(path.c_str(), "w");
  fputs(("import torch\n" + code).c_str(), f);
  fclose(f);
  FILE* p = popen(("/usr/bin/python3 " + path + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(p ? pclose(p) : -1, 0) << "python3-torch is needed (tools/setup.sh installs it):\n"
                                   << out;
  std::remove(path.c_str());
  std::vector<double> values;
  std::istringstream in(out);
  for (double v; in >> v;) values.push_back(v);
  return values;
}
