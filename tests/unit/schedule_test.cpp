// Learning-rate schedules against the values Debian's python3-torch computes (see
// schedule_reference.py): the same rate at every step, and one_cycle's momentum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "common/error.hpp"
#include "optim/scheduler.hpp"

using accel::optim::Schedule;

namespace {

struct Ref {
  double lr, momentum;
};

// case -> values per step, from the reference script.
std::map<std::string, std::vector<Ref>> reference() {
  const std::string cmd = std::string("/usr/bin/python3 ") + SCHEDULE_REFERENCE + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = p ? pclose(p) : -1;
  EXPECT_EQ(status, 0) << "the reference needs Debian's python3-torch (tools/setup.sh installs "
                          "it):\n"
                       << out;
  std::map<std::string, std::vector<Ref>> values;
  std::istringstream in(out);
  std::string name;
  int step;
  std::string lr, mom;
  while (in >> name >> step >> lr >> mom) values[name].push_back({std::stod(lr), std::stod(mom)});
  return values;
}

Schedule make(const std::string& kind,
              std::initializer_list<std::pair<const char*, const char*>> o) {
  Schedule s(kind);
  for (const auto& [k, v] : o) s.set(k, v);
  s.validate();
  return s;
}

}  // namespace

TEST(Schedule, MatchesPyTorchForEveryKind) {
  const auto ref = reference();
  const std::map<std::string, Schedule> ours = {
      {"constant", make("constant", {})},
      {"constant_with_warmup", make("constant_with_warmup", {{"warmup_steps", "4"}})},
      {"linear", make("linear", {{"warmup_steps", "3"}, {"total_steps", "20"}})},
      {"cosine", make("cosine", {{"warmup_steps", "3"}, {"total_steps", "20"}})},
      {"cosine_with_restarts",
       make("cosine_with_restarts",
            {{"warmup_steps", "2"}, {"total_steps", "20"}, {"num_cycles", "3"}})},
      {"polynomial",
       make("polynomial",
            {{"warmup_steps", "2"}, {"total_steps", "15"}, {"lr_end", "1e-3"}, {"power", "2"}})},
      {"step", make("step", {{"step_size", "3"}, {"gamma", "0.5"}})},
      {"exponential", make("exponential", {{"gamma", "0.9"}})},
      {"one_cycle", make("one_cycle", {{"max_lr", "0.5"}, {"total_steps", "20"}})},
      {"one_cycle_linear_adamw", make("one_cycle", {{"max_lr", "0.01"},
                                                    {"total_steps", "15"},
                                                    {"pct_start", "0.4"},
                                                    {"anneal_strategy", "linear"}})},
  };
  ASSERT_EQ(ref.size(), ours.size());
  for (const auto& [name, schedule] : ours) {
    ASSERT_TRUE(ref.count(name)) << name;
    const auto& values = ref.at(name);
    for (size_t step = 0; step < values.size(); ++step) {
      const double want = values[step].lr;
      EXPECT_NEAR(schedule.lr_at(static_cast<int64_t>(step), 0.1), want,
                  1e-12 + 1e-9 * std::abs(want))
          << name << " step " << step;
      if (auto m = schedule.momentum_at(static_cast<int64_t>(step)))
        EXPECT_NEAR(*m, values[step].momentum, 1e-12) << name << " momentum, step " << step;
    }
  }
}

TEST(Schedule, BadOptionsAreClearErrors) {
  EXPECT_THROW(Schedule("cosine_annealing"), accel::Error);
  Schedule s("linear");
  EXPECT_THROW(s.set("warmup", "3"), accel::Error);
  EXPECT_THROW(s.set("warmup_steps", "-1"), accel::Error);
  EXPECT_THROW(s.set("warmup_steps", "three"), accel::Error);
  try {
    s.validate();
    FAIL();
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("total_steps"), std::string::npos) << e.what();
  }
  Schedule c("constant");
  try {
    c.set("gamma", "1");
    FAIL();
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("takes none"), std::string::npos) << e.what();
  }
}
