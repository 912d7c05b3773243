// ZeRO stage 3 from an empty model, on 2 and 3 real processes over Gloo (zero3_empty_program):
// accel_prepare of a model built empty allocates only each rank's share, every use before the load
// is ACCEL_ERR_STATE on every rank, the load after prepare reads only each rank's bytes, and from
// there the forward, three AdamW steps and save_model are bitwise those of the whole model loaded
// before a stage 0 prepare. A not-strict load gives the missing tensors the values a single
// process's empty model gets; an empty model under stage 2 is refused, saying what to do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace {

using mp_test::run;

const std::string kLaunch = std::string(ACCEL_CLI) + " launch -n ";
const std::string kProgram = ZERO3_EMPTY_PROGRAM;
const std::string kGloo = "ACCEL_SHARED_MEMORY_ALLREDUCE=false ";
// Everything a load reads besides the tensors: the index, the headers, the ranks' agreement.
constexpr long long kSlack = 64 << 10;

std::string launch(int n, const std::string& args) {
  return kLaunch + std::to_string(n) + " " + kProgram + " " + args;
}

// The lines of `output` that start with `prefix`, in order.
std::vector<std::string> lines(const std::string& output, const std::string& prefix) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < output.size()) {
    const size_t end = output.find('\n', at);
    const std::string line = output.substr(at, end == std::string::npos ? end : end - at);
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  std::sort(out.begin(), out.end());  // the ranks print in any order
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  return run("cmp " + a + " " + b).code == 0;
}

class Zero3Empty : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "zero3_empty_" + std::to_string(getpid());
    const auto w =
        run("rm -rf " + dir_ + " && mkdir -p " + dir_ + " && " + launch(1, "write " + dir_));
    ASSERT_EQ(w.code, 0) << w.output;
  }
  static void TearDownTestSuite() { run("rm -rf " + dir_); }
  static std::string dir_;
};
std::string Zero3Empty::dir_;

void expect_stage0_bitwise(const std::string& dir, int n, const std::string& stage3) {
  const std::string tag = std::to_string(n);
  const auto base = run(kGloo + launch(n, "train whole " + dir + " " + dir + "/base" + tag));
  ASSERT_EQ(base.code, 0) << base.output;
  const auto got = run(kGloo + stage3 + launch(n, "train empty " + dir + " " + dir + "/z3_" + tag));
  ASSERT_EQ(got.code, 0) << got.output;
  // Before the load: every use refused on every rank, naming a tensor still empty.
  for (const char* what : {"forward", "tensor", "step", "save", "save_state"}) {
    const auto refusals = lines(got.output, std::string("refused "));
    int count = 0;
    for (const auto& r : refusals)
      if (r.find(std::string(" ") + what + " ACCEL_ERR_STATE: ") != std::string::npos) {
        ++count;
        EXPECT_NE(r.find("still empty"), std::string::npos) << r;
        EXPECT_NE(r.find("'fc"), std::string::npos) << r;
      }
    EXPECT_EQ(count, n) << what << "\n" << got.output;
  }
  EXPECT_TRUE(lines(got.output, "allowed ").empty()) << got.output;
  // The load: each rank holds a part and read little more than it.
  const std::regex held(R"(rank (\d+) read (\d+) holds (\d+) of (\d+) buffers (\d+))");
  // bn's buffers (running_mean, running_var: 64 floats each; num_batches_tracked: one int64),
  // empty too (include_buffers) and allocated whole on every rank.
  constexpr long long kBuffers = (64 + 64) * 4 + 8;
  long long sum = 0, total = 0;
  int ranks = 0;
  for (const auto& line : lines(got.output, "rank ")) {
    std::smatch m;
    if (!std::regex_match(line, m, held)) continue;
    const long long read = std::stoll(m[2]), holds = std::stoll(m[3]);
    total = std::stoll(m[4]);
    EXPECT_GT(holds, 0) << line;
    EXPECT_LT(holds, total) << line;
    EXPECT_EQ(std::stoll(m[5]), kBuffers) << line;
    EXPECT_GE(read, holds + kBuffers) << line;
    EXPECT_LE(read, holds + kBuffers + kSlack) << "only this rank's bytes\n" << line;
    sum += holds;
    ++ranks;
  }
  EXPECT_EQ(ranks, n) << got.output;
  EXPECT_EQ(sum, total) << got.output;
  // From there on, stage 0's bits.
  EXPECT_EQ(lines(got.output, "out "), lines(base.output, "out ")) << got.output;
  EXPECT_EQ(lines(got.output, "loss "), lines(base.output, "loss ")) << got.output;
  EXPECT_EQ(lines(base.output, "loss ").size(), static_cast<size_t>(3 * n)) << base.output;
  EXPECT_TRUE(same_file(dir + "/base" + tag + "/model.safetensors",
                        dir + "/z3_" + tag + "/model.safetensors"))
      << "save_model after training: not stage 0's bytes";
}

TEST_F(Zero3Empty, TwoRanksLoadAfterPrepareTrainAndSaveAsStageZero) {
  // fsdp_cpu_ram_efficient_loading off: an empty model reads only each rank's bytes regardless.
  expect_stage0_bitwise(dir_, 2,
                        "ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=FULL_SHARD "
                        "FSDP_CPU_RAM_EFFICIENT_LOADING=false ");
}

TEST_F(Zero3Empty, ThreeRanksLoadAfterPrepareTrainAndSaveAsStageZero) {
  expect_stage0_bitwise(dir_, 3,
                        "ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 ");
}

TEST_F(Zero3Empty, NotStrictLoadGivesMissingTensorsASingleProcesssInitialisation) {
  const auto single = run(launch(1, "partial " + dir_ + " " + dir_ + "/partial1"));
  ASSERT_EQ(single.code, 0) << single.output;
  // fc3's weight and bias, bn's weight, bias and three buffers.
  EXPECT_NE(single.output.find("rank 0 missing 7"), std::string::npos) << single.output;
  const auto sharded =
      run(kGloo + "ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 " +
          launch(2, "partial " + dir_ + " " + dir_ + "/partial2"));
  ASSERT_EQ(sharded.code, 0) << sharded.output;
  EXPECT_NE(sharded.output.find("rank 1 missing 7"), std::string::npos) << sharded.output;
  EXPECT_TRUE(same_file(dir_ + "/partial1/model.safetensors", dir_ + "/partial2/model.safetensors"))
      << "bn and fc3 (missing from the checkpoint) initialised otherwise than on one process";
}

TEST_F(Zero3Empty, StageTwoAndOneProcessRefuseAnEmptyModelSayingWhatToDo) {
  for (const std::string& env :
       {kGloo + "ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=2 ",
        std::string()}) {
    const int n = env.empty() ? 1 : 2;
    const auto r = run(env + launch(n, "refuse"));
    ASSERT_EQ(r.code, 0) << r.output;
    const auto refusals = lines(r.output, "refused ");
    ASSERT_EQ(refusals.size(), static_cast<size_t>(n)) << r.output;
    for (const auto& line : refusals) {
      EXPECT_NE(line.find("prepare ACCEL_ERR_STATE: accel_prepare: 'fc1.weight' and 9 other "
                          "tensor(s) of the model are still empty"),
                std::string::npos)
          << line;
      EXPECT_NE(line.find("load it first"), std::string::npos) << line;
      EXPECT_NE(line.find("ZeRO stage 3"), std::string::npos) << line;
    }
  }
}

}  // namespace
