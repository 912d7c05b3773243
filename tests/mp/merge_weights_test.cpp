// `accel merge-weights` on a real save: 2 ranks over Gloo train under ZeRO stage 3 and
// accel_save_state; the merged model.safetensors loads, on 1 process at stage 0 and on 2 at stage
// 3, with accel_load_checkpoint_in_model and accel_load_pretrained (also through a name map), into
// parameters bitwise those the saving run held. Then the command's errors on a broken save: each a
// message naming the file, a non-zero exit, and nothing written at the output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <string>

#include "run_command.hpp"

namespace {

using mp_test::run;

const std::string kCli = ACCEL_CLI;
const std::string kProgram = MERGE_WEIGHTS_PROGRAM;
const std::string kStage3 = "ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=FULL_SHARD ";

std::set<std::string> files_in(const std::string& dir) {
  const auto r = run("{ ls " + dir + " 2>/dev/null; }");
  std::set<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = r.output.find('\n', start)) != std::string::npos; start = nl + 1)
    if (nl > start) out.insert(r.output.substr(start, nl - start));
  return out;
}

// Every parameter file of `got` is byte for byte `want`'s, and they hold the same names.
void expect_same_parameters(const std::string& want, const std::string& got) {
  const auto names = files_in(want);
  ASSERT_EQ(names.size(), 8u) << "fc1-3 weight and bias, norm's weight and bias: " << want;
  EXPECT_EQ(files_in(got), names) << got;
  for (const auto& n : names)
    EXPECT_EQ(run("cmp " + want + "/" + n + " " + got + "/" + n).code, 0) << got << "/" << n;
}

// As expect_same_parameters, with norm's weight and bias swapped (the name map's load).
void expect_swapped_norm(const std::string& want, const std::string& got) {
  ASSERT_EQ(files_in(got), files_in(want)) << got;
  for (const auto& n : files_in(want)) {
    const std::string from = n == "norm.weight.bin" ? "norm.bias.bin"
                             : n == "norm.bias.bin" ? "norm.weight.bin"
                                                    : n;
    EXPECT_EQ(run("cmp " + want + "/" + from + " " + got + "/" + n).code, 0) << got << "/" << n;
  }
  // The swap is seen: trained weight and bias differ.
  EXPECT_NE(run("cmp " + want + "/norm.weight.bin " + want + "/norm.bias.bin").code, 0);
}

// Under stage 3 each of the 2 ranks holds only some of the 8 parameters.
void expect_sharded(const std::string& output) {
  for (const char* rank : {"rank 0 holds ", "rank 1 holds "}) {
    const auto at = output.find(rank);
    ASSERT_NE(at, std::string::npos) << output;
    EXPECT_LT(std::stoi(output.substr(at + 13)), 8) << output;
  }
}

class MergeWeights : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "merge_weights_" + std::to_string(getpid());
    const auto made = run("rm -rf " + dir_ + " && mkdir -p " + dir_ + "/trained");
    ASSERT_EQ(made.code, 0);
    const auto trained = run(kStage3 + kCli + " launch -n 2 " + kProgram + " train " + dir_);
    ASSERT_EQ(trained.code, 0) << trained.output;
    expect_sharded(trained.output);
  }
  static void TearDownTestSuite() { run("rm -rf " + dir_); }
  static std::string dir_;
};
std::string MergeWeights::dir_;

TEST_F(MergeWeights, Stage3SaveLoadsBitwiseAtStage0AndStage3) {
  const auto merged = run(kCli + " merge-weights " + dir_ + "/state " + dir_ + "/merged");
  ASSERT_EQ(merged.code, 0) << merged.output;
  EXPECT_NE(merged.output.find(dir_ + "/merged/model.safetensors"), std::string::npos)
      << merged.output;
  // save_state writes the model whole at stage 3 too: the merge is its checked copy.
  EXPECT_EQ(
      run("cmp " + dir_ + "/state/model_0.safetensors " + dir_ + "/merged/model.safetensors").code,
      0);
  ASSERT_EQ(
      run("mkdir -p " + dir_ + "/s0/checkpoint " + dir_ + "/s0/pretrained " + dir_ + "/s0/mapped " +
          dir_ + "/s3/checkpoint " + dir_ + "/s3/pretrained " + dir_ + "/s3/mapped")
          .code,
      0);
  const auto s0 = run(kCli + " launch -n 1 " + kProgram + " load " + dir_ +
                      "/merged/model.safetensors " + dir_ + "/s0");
  ASSERT_EQ(s0.code, 0) << s0.output;
  const auto s3 = run(kStage3 + kCli + " launch -n 2 " + kProgram + " load " + dir_ + "/merged " +
                      dir_ + "/s3");
  ASSERT_EQ(s3.code, 0) << s3.output;
  expect_sharded(s3.output);
  for (const char* loader : {"checkpoint", "pretrained"}) {
    expect_same_parameters(dir_ + "/trained", dir_ + "/s0/" + loader);
    expect_same_parameters(dir_ + "/trained", dir_ + "/s3/" + loader);
  }
  expect_swapped_norm(dir_ + "/trained", dir_ + "/s0/mapped");
  expect_swapped_norm(dir_ + "/trained", dir_ + "/s3/mapped");
  // Each rank reading only what it owns (fsdp_cpu_ram_efficient_loading), through the map too.
  ASSERT_EQ(run("mkdir -p " + dir_ + "/s3e/checkpoint " + dir_ + "/s3e/pretrained " + dir_ +
                "/s3e/mapped")
                .code,
            0);
  const auto s3e = run(kStage3 + "FSDP_CPU_RAM_EFFICIENT_LOADING=true " + kCli + " launch -n 2 " +
                       kProgram + " load " + dir_ + "/merged " + dir_ + "/s3e");
  ASSERT_EQ(s3e.code, 0) << s3e.output;
  expect_sharded(s3e.output);
  expect_same_parameters(dir_ + "/trained", dir_ + "/s3e/pretrained");
  expect_swapped_norm(dir_ + "/trained", dir_ + "/s3e/mapped");
}

TEST_F(MergeWeights, BrokenSavesAreRefusedAndNothingIsWritten) {
  const std::string broken = dir_ + "/broken";
  auto refused = [&](const std::string& from, const std::string& part) {
    const std::string out = dir_ + "/refused";
    const auto r = run(kCli + " merge-weights " + from + " " + out);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("accel merge-weights: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << r.output;
    EXPECT_NE(run("test -e " + out).code, 0) << "written despite the error: " << r.output;
  };
  refused(dir_ + "/trained", "is not an accel_save_state directory");
  ASSERT_EQ(run("cp -r " + dir_ + "/state " + broken + " && rm " + broken +
                "/random_states_1.safetensors")
                .code,
            0);
  refused(broken, "random_states_1.safetensors', listed in");
  ASSERT_EQ(run("cp " + dir_ + "/state/random_states_1.safetensors " + broken +
                " && truncate -s -16 " + broken + "/model_0.safetensors")
                .code,
            0);
  refused(broken, "truncated or altered");
}

}  // namespace
