// Loading a checkpoint into a model prepared under ZeRO stage 3, on 2 real processes over Gloo
// (ram_load_program): with fsdp_cpu_ram_efficient_loading each rank reads only the bytes of the
// parameters it holds (the kernel's count of the bytes the process read); without it each reads
// the whole checkpoint; either way the model saved afterwards is byte for byte the one loaded
// before prepare on one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>

#include "run_command.hpp"

namespace {

using mp_test::run;

const std::string kLaunch = std::string(ACCEL_CLI) + " launch -n ";
const std::string kProgram = RAM_LOAD_PROGRAM;
// Everything a load reads besides the tensors: the index, the headers, the ranks' agreement.
constexpr long long kSlack = 64 << 10;

struct Load {
  long long read = -1, held = -1, total = -1;
};

// "rank R LOADER read B holds H of T" of each rank and loader.
std::map<std::string, Load> loads_of(const std::string& output) {
  std::map<std::string, Load> out;
  const std::regex line(R"(rank (\d+) (\w+) read (\d+) holds (\d+) of (\d+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    out[(*it)[1].str() + " " + (*it)[2].str()] = {std::stoll((*it)[3]), std::stoll((*it)[4]),
                                                  std::stoll((*it)[5])};
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  return run("cmp " + a + " " + b).code == 0;
}

TEST(RamEfficientLoading, Stage3ReadsOnlyEachRanksBytesAndLoadsAsStage0) {
  const std::string dir = ::testing::TempDir() + "ram_load_" + std::to_string(getpid());
  ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir + "/base").code, 0);
  const auto written = run(kLaunch + "1 " + kProgram + " write " + dir);
  ASSERT_EQ(written.code, 0) << written.output;
  // Stage 0 on one process: the reference, and the plain loads read the whole checkpoint once.
  const auto base = run(kLaunch + "1 " + kProgram + " load " + dir);
  ASSERT_EQ(base.code, 0) << base.output;
  for (const char* loader : {"pretrained", "checkpoint"}) {
    const Load l = loads_of(base.output)[std::string("0 ") + loader];
    EXPECT_EQ(l.held, l.total) << base.output;
    EXPECT_GE(l.read, l.total) << base.output;
    EXPECT_LE(l.read, l.total + kSlack) << "one pass over the tensors\n" << base.output;
    ASSERT_EQ(run(std::string("mv ") + dir + "/out_" + loader + " " + dir + "/base/").code, 0);
  }
  const std::string fsdp = "ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=FULL_SHARD ";
  for (const bool efficient : {true, false}) {
    const std::string what = efficient ? "efficient" : "gathered";
    const auto r = run(fsdp + "FSDP_CPU_RAM_EFFICIENT_LOADING=" + (efficient ? "true " : "false ") +
                       kLaunch + "2 " + kProgram + " load " + dir);
    ASSERT_EQ(r.code, 0) << what << r.output;
    const auto loads = loads_of(r.output);
    for (const char* loader : {"pretrained", "checkpoint"}) {
      long long held = 0;
      for (int rank : {0, 1}) {
        const Load l = loads.at(std::to_string(rank) + " " + loader);
        EXPECT_LT(l.held, l.total) << "each rank holds a part\n" << r.output;
        held += l.held;
        if (efficient) {
          EXPECT_GE(l.read, l.held) << what << " " << loader << "\n" << r.output;
          EXPECT_LE(l.read, l.held + kSlack) << what << " " << loader << "\n" << r.output;
        } else {
          EXPECT_GE(l.read, l.total) << what << " " << loader << "\n" << r.output;
        }
      }
      EXPECT_EQ(held, loads.at(std::string("0 ") + loader).total) << r.output;
      EXPECT_TRUE(same_file(dir + "/base/out_" + std::string(loader) + "/model.safetensors",
                            dir + "/out_" + loader + "/model.safetensors"))
          << what << " " << loader << ": not stage 0's bytes";
    }
  }
  run("rm -rf " + dir);
}

}  // namespace
