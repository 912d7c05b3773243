// find_executable_batch_size, LocalSGD, sync_each_batch, no_sync, the profiler and the per-process
// helpers on real processes over Gloo, started by `accel launch` (step_tools_program.cpp).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace {

using mp_test::Result;
using mp_test::run;

Result launch(int n, const std::string& args) {
  return run(std::string(ACCEL_CLI) + " launch -n " + std::to_string(n) + " " + STEP_TOOLS_PROGRAM +
             " " + args);
}

Result alone(const std::string& args) {
  return run(std::string("env -u WORLD_SIZE -u RANK ") + STEP_TOOLS_PROGRAM + " " + args);
}

// The lines that start with `prefix`, without it.
std::vector<std::string> lines_of(const std::string& output, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  return out;
}

// Every "param" value, in order.
std::vector<double> params_of(const std::string& output) {
  std::vector<double> values;
  for (const auto& line : lines_of(output, "param ")) {
    std::istringstream in(line);
    std::string index;
    in >> index;
    for (double v; in >> v;) values.push_back(v);
  }
  return values;
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

std::string temp_dir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "step_tools_" + name + "_" + std::to_string(getpid());
  run("rm -rf '" + dir + "' && mkdir -p '" + dir + "'");
  return dir;
}

TEST(BatchSizeSearch, TwoRanksAgreeOnTheSizeBothCanRunInOneCollectivePerTry) {
  const Result r = launch(2, "batch_fake 40 20");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string tried = " 128 115 103 92 82 73 65 58 52 46 41 36 32 28 25 22 19";
  EXPECT_NE(r.output.find("rank 0 size 19 tried" + tried + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 size 19 tried" + tried + "\n"), std::string::npos) << r.output;
}

TEST(BatchSizeSearch, RealOutOfMemoryUnderDifferentLimitsSettlesOnOneSizeThatFits) {
  if (ACCEL_TEST_SANITIZED)
    GTEST_SKIP() << "a sanitizer's shadow memory and allocator do not live under RLIMIT_AS";
  // Rank 0 may use 512 MiB more than it has mapped, rank 1 48 MiB: a try of n MiB fails on rank
  // 1 first, and both go on with a size rank 1 could allocate.
  const Result r = launch(2, "batch_real 512 48");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto zero = lines_of(r.output, "rank 0 size ");
  const auto one = lines_of(r.output, "rank 1 size ");
  ASSERT_EQ(zero.size(), 1u) << r.output;
  ASSERT_EQ(one.size(), 1u) << r.output;
  const long long size0 = std::atoll(zero[0].c_str()), size1 = std::atoll(one[0].c_str());
  EXPECT_EQ(size0, size1) << r.output;
  EXPECT_GT(size1, 0);
  // About 48 MiB fit: the limit counts what is mapped, and some of what rank 1 had mapped before
  // (LibTorch's and libaccel's freed blocks) is free again for the try.
  EXPECT_LT(size1, 64) << r.output;
  EXPECT_NE(one[0].find("failed 128"), std::string::npos) << "rank 1 never ran out:\n" << r.output;
  EXPECT_EQ(zero[0].find("failed " + std::to_string(size0)), std::string::npos);
  EXPECT_NE(r.output.find("ran out of memory on rank 1"), std::string::npos) << r.output;
}

TEST(LocalSgd, EveryStepEqualsDataParallelTraining) {
  const Result ddp = launch(2, "local_sgd 0 12 none");
  const Result every = launch(2, "local_sgd 1 12 none");
  ASSERT_EQ(ddp.code, 0) << ddp.output;
  ASSERT_EQ(every.code, 0) << every.output;
  EXPECT_LT(max_relative_difference(params_of(every.output), params_of(ddp.output)), 1e-7);
  EXPECT_EQ(lines_of(every.output, "averages "), std::vector<std::string>{"12"});
}

TEST(LocalSgd, EveryFourStepsEqualsReplicasAveragedInOneProcess) {
  for (const char* outer : {"none", "nesterov"}) {
    const Result two = launch(2, std::string("local_sgd 4 10 ") + outer);
    const Result sim = alone(std::string("simulate 2 4 10 ") + outer);
    ASSERT_EQ(two.code, 0) << two.output;
    ASSERT_EQ(sim.code, 0) << sim.output;
    EXPECT_LT(max_relative_difference(params_of(two.output), params_of(sim.output)), 1e-12)
        << outer;
    // ceil(10 / 4): after steps 4 and 8, and at the end for steps 9 and 10.
    EXPECT_EQ(lines_of(two.output, "averages "), std::vector<std::string>{"3"}) << outer;
  }
  const Result even = launch(2, "local_sgd 4 8 none");
  EXPECT_EQ(lines_of(even.output, "averages "), std::vector<std::string>{"2"}) << even.output;
  const Result ddp = launch(2, "local_sgd 0 10 none");
  const Result four = launch(2, "local_sgd 4 10 none");
  EXPECT_GT(max_relative_difference(params_of(four.output), params_of(ddp.output)), 1e-6)
      << "averaging every 4 steps should differ from DDP";
}

TEST(LocalSgd, RefusedUnderZero) {
  // Accelerate's launcher's words for ZeRO stage 2.
  const Result r =
      run("ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=2 " +
          std::string(ACCEL_CLI) + " launch -n 2 " + STEP_TOOLS_PROGRAM + " local_sgd 4 2 none");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("LocalSGD averages whole parameters"), std::string::npos) << r.output;
}

// Per rank and micro-step, the sum of the gradients each rank holds.
std::map<int, std::vector<std::string>> grads_by_step(const std::string& output) {
  std::map<int, std::vector<std::string>> by_step;
  for (const auto& line : lines_of(output, "grad ")) {
    std::istringstream in(line);
    int rank = 0, step = 0;
    std::string sum;
    in >> rank >> step >> sum;
    by_step[step].push_back(sum);
  }
  return by_step;
}

TEST(GradientAccumulation, SyncEachBatchReducesEveryMicroStepWithTheSameResult) {
  const Result each = launch(2, "sync_each_batch true");
  const Result usual = launch(2, "sync_each_batch false");
  ASSERT_EQ(each.code, 0) << each.output;
  ASSERT_EQ(usual.code, 0) << usual.output;
  const auto synced = grads_by_step(each.output), plain = grads_by_step(usual.output);
  for (int step = 0; step < 4; ++step) {
    ASSERT_EQ(synced.at(step).size(), 2u);
    EXPECT_EQ(synced.at(step)[0], synced.at(step)[1]) << "micro-step " << step;
    EXPECT_EQ(plain.at(step)[0] == plain.at(step)[1], step % 2 == 1) << "micro-step " << step;
  }
  EXPECT_LT(max_relative_difference(params_of(each.output), params_of(usual.output)), 1e-12);
}

TEST(NoSync, GradientsStayLocalInsideAndTheNextBackwardReducesThemAll) {
  const Result r = launch(2, "no_sync");
  ASSERT_EQ(r.code, 0) << r.output;
  auto inside = lines_of(r.output, "inside ");
  auto after = lines_of(r.output, "after ");
  ASSERT_EQ(inside.size(), 2u) << r.output;
  ASSERT_EQ(after.size(), 2u) << r.output;
  EXPECT_NE(inside[0].substr(2), inside[1].substr(2));
  EXPECT_EQ(after[0].substr(2), after[1].substr(2));
}

TEST(Profiler, EachRankWritesItsChromeTraceWithAtenEvents) {
  const std::string dir = temp_dir("profile");
  const Result r = launch(2, "profile " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(dir + "/profile_" + std::to_string(rank) + ".json");
    ASSERT_TRUE(in.good()) << "rank " << rank << " wrote no trace\n" << r.output;
    const auto trace = nlohmann::json::parse(in);
    int aten = 0;
    for (const auto& e : trace["traceEvents"]) {
      EXPECT_EQ(e["pid"], rank);
      if (e["name"].get<std::string>().rfind("aten::", 0) == 0) ++aten;
    }
    EXPECT_GT(aten, 5) << "rank " << rank;
  }
  EXPECT_NE(r.output.find("Self CPU time total:"), std::string::npos)
      << "the main process logs the table\n"
      << r.output;
  // Profiled without an output_trace_dir, from an empty working directory: nothing is written.
  const std::string off = temp_dir("off");
  const Result quiet = run("cd '" + off + "' && " + std::string(ACCEL_CLI) + " launch -n 2 " +
                           STEP_TOOLS_PROGRAM + " profile ''");
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_NE(quiet.output.find("rank 1 windows 1"), std::string::npos) << quiet.output;
  EXPECT_EQ(run("ls -A '" + off + "' | wc -l").output, "0\n");
}

TEST(PerProcess, LocalMainFirstRunsBeforeTheOthersAndTheHelpersPickTheirProcess) {
  const std::string dir = temp_dir("first");
  const Result r = launch(3, "local_first " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 saw it"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 2 saw it"), std::string::npos) << r.output;
  EXPECT_EQ(lines_of(r.output, "last "), std::vector<std::string>{"2"});
  EXPECT_EQ(lines_of(r.output, "main "), std::vector<std::string>{"0"});
  EXPECT_EQ(lines_of(r.output, "local main "), std::vector<std::string>{"0"});
  EXPECT_EQ(lines_of(r.output, "process one "), std::vector<std::string>{"1"});
}

}  // namespace
