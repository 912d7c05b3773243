// Optimizer parameter groups on two real processes over Gloo (param_groups_program.c, started by
// `accel launch`): ZeRO stages 1 and 2 step each parameter with its own group's options, as stage
// 0 does, and the groups' options and rates resume from save_state, sharded or not.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace {

using mp_test::Result;
using mp_test::run;

// Accelerate's launcher's words for ZeRO stage N (empty: stage 0).
std::string stage(int n) {
  return n ? "ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=" + std::to_string(n) +
                 " "
           : "";
}

Result launch(int zero_stage, const std::string& args) {
  return run(stage(zero_stage) + ACCEL_CLI + " launch -n 2 " + PARAM_GROUPS_PROGRAM + " " + args);
}

// "param NAME v..." and "lr G v" lines: name -> values.
std::map<std::string, std::vector<double>> results_of(const std::string& output) {
  std::map<std::string, std::vector<double>> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind >> name;
    if (kind != "param" && kind != "lr") continue;
    for (double v; words >> v;) out[kind + " " + name].push_back(v);
  }
  return out;
}

// Every value within `tolerance` of its size (0: the same bits, as printed).
void expect_same(const Result& want, const Result& got, double tolerance, const std::string& what) {
  ASSERT_EQ(want.code, 0) << want.output;
  ASSERT_EQ(got.code, 0) << what << "\n" << got.output;
  const auto a = results_of(want.output), b = results_of(got.output);
  ASSERT_EQ(a.size(), 9u) << "6 parameters and 3 groups' rates\n" << want.output;
  ASSERT_EQ(b.size(), a.size()) << what << "\n" << got.output;
  for (const auto& [name, values] : a) {
    ASSERT_EQ(b.at(name).size(), values.size()) << name << ", " << what;
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_LE(std::abs(values[i] - b.at(name)[i]), tolerance * std::abs(values[i]))
          << name << "[" << i << "], " << what;
  }
}

}  // namespace

TEST(ParamGroupsTwoProcesses, ZeroStagesOneAndTwoStepEveryGroupAsStageZero) {
  const auto plain = launch(0, "train 12");
  for (int s : {1, 2})
    expect_same(plain, launch(s, "train 12"), 1e-6, "ZeRO stage " + std::to_string(s));
  // The groups matter: the head's rate is 0.03 and the biases decay not.
  const auto r = results_of(plain.output);
  EXPECT_NE(r.at("lr 2"), r.at("lr 0"));
  EXPECT_EQ(r.at("lr 1"), r.at("lr 0"));
}

TEST(ParamGroupsTwoProcesses, GroupsResumeFromSaveStateAtAnyStage) {
  const std::string dir =
      ::testing::TempDir() + "param_groups_mp_state_" + std::to_string(getpid());
  std::system(("rm -rf " + dir).c_str());
  // Saved under ZeRO stage 1 (each rank's part of the optimizer state), before step 5 of 10.
  const auto whole = launch(1, "save " + dir + " 5 10");
  ASSERT_EQ(whole.code, 0) << whole.output;
  expect_same(whole, launch(1, "load " + dir + " 5 10"), 0, "resumed at stage 1");
  expect_same(whole, launch(0, "load " + dir + " 5 10"), 1e-6, "resumed at stage 0");
  std::system(("rm -rf " + dir).c_str());
}
