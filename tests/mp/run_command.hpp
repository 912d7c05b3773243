// A shell command run to its end, stdout and stderr together, for the tests that start ranks with
// `accel launch`: no user configuration (HF_HOME points nowhere), one intra-op thread per rank.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace mp_test {

struct Result {
  int code = -1;
  std::string output;
};

inline Result run(const std::string& command) {
  Result r;
  FILE* p = popen(
      ("export HF_HOME=/nonexistent-hf-home OMP_NUM_THREADS=1; " + command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace mp_test
