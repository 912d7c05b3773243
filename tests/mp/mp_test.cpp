// Real processes over real Gloo: `accel launch` starts mp_program ranks, which check their own
// results; this test checks exit codes, messages and timing.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/stream_shard.hpp"

namespace {

struct Result {
  int code = -1;
  std::string output;
  double seconds = 0;
};

// Runs a bash command line, stdout and stderr together. HF_HOME points nowhere, so no user
// configuration leaks in.
Result run(const std::string& command) {
  static std::atomic<int> counter{0};
  const auto start = std::chrono::steady_clock::now();
  const std::string script = ::testing::TempDir() + "mp_cmd_" + std::to_string(getpid()) + "_" +
                             std::to_string(counter++) + ".sh";
  {
    std::ofstream out(script);
    out << "export HF_HOME=/nonexistent-hf-home MP_TEST_DIR='" << ::testing::TempDir() << "'\n"
        << command << "\n";
  }
  Result r;
  FILE* p = popen(("bash " + script + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

const std::string kAccel = ACCEL_CLI;
const std::string kProgram = MP_PROGRAM;
const std::string kFailFork = FAIL_FORK_SHIM;
// Built with a sanitizer (tools/sanitize.sh): long repetitions run a shorter course there.
constexpr bool kSanitized = ACCEL_TEST_SANITIZED;

std::string launch(int n, const std::string& mode, const std::string& flags = "") {
  return kAccel + " launch -n " + std::to_string(n) + " " + flags + " " + kProgram + " " + mode;
}

// `accel launch -n N PROGRAM ARGS`: a rank program of its own.
std::string launch_program(int n, const std::string& program, const std::string& args) {
  return kAccel + " launch -n " + std::to_string(n) + " " + program + " " + args;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A TCP socket bound to a port the OS picked; with `listening`, it also accepts connections.
struct Socket {
  int fd = -1;
  int port = 0;
  explicit Socket(bool listening) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (listening) listen(fd, 1);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Socket() { close(fd); }
};

// A port nobody listens on right now (for tests that must name one).
int free_port() {
  return Socket(false).port;
}

}  // namespace

TEST(MultiProcess, CollectivesOnTwoRanks) {
  const auto r = run(launch(2, "check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0 of 2: all collectives OK")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 of 2: all collectives OK")) << r.output;
}

TEST(MultiProcess, CollectivesOnThreeRanks) {
  const auto r = run(launch(3, "check", "--prefix_output"));
  EXPECT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(contains(r.output, "[rank " + std::to_string(rank) + "] rank " +
                                       std::to_string(rank) + " of 3: all collectives OK"))
        << r.output;
}

// The same checks with all-reduces over Gloo, as between machines (shared memory turned off).
// Over libaccel's TCP ring (the transport between machines), and over LibTorch's Gloo, which
// collective_transport still offers.
TEST(MultiProcess, CollectivesOnThreeRanksOverTcpAndOverGloo) {
  for (const char* transport : {"tcp", "gloo"}) {
    const auto r = run("ACCEL_SHARED_MEMORY_ALLREDUCE=false ACCEL_COLLECTIVE_TRANSPORT=" +
                       std::string(transport) + " " + launch(3, "check"));
    EXPECT_EQ(r.code, 0) << transport << "\n" << r.output;
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + " of 3: all collectives OK"))
          << transport << "\n"
          << r.output;
  }
}

TEST(MultiProcess, OneRankIsAWorldOfOne) {
  const auto r = run(launch(1, "check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0 of 1: all collectives OK")) << r.output;
}

TEST(MultiProcess, RankExitingMidCollectiveStopsTheJobNamingIt) {
  const auto r = run(launch(3, "die", "--grace_period 2"));
  EXPECT_EQ(r.code, 3) << "the launcher exits with the failed rank's code\n" << r.output;
  EXPECT_TRUE(contains(r.output, "accel launch: rank 1 (pid")) << r.output;
  EXPECT_TRUE(contains(r.output, "exited with code 3")) << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
}

TEST(MultiProcess, RankQuittingCleanlyMidCollectiveFailsThePeersAndIsNamed) {
  const auto r = run(launch(2, "quit"));
  EXPECT_EQ(r.code, 4) << "rank 0 saw ACCEL_ERR_PEER_FAILED\n" << r.output;
  EXPECT_TRUE(contains(r.output, "ACCEL_ERR_PEER_FAILED")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 exited with code 0 while the others still ran"))
      << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
}

TEST(MultiProcess, RankThatNeverStartsIsNamedByTheCensus) {
  const auto r = run("ACCEL_RENDEZVOUS_TIMEOUT=3 " + launch(3, "census"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: rendezvous failed: 1 of 3 ranks did not arrive"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: rendezvous failed")) << r.output;
  EXPECT_LT(r.seconds, 10.0);
}

TEST(MultiProcess, CensusWithoutTheLauncherRankZeroHostsTheStore) {
  // torchrun's contract: rank 0 opens the store on MASTER_PORT, the others connect to it.
  const std::string common =
      "WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
      " ACCEL_RENDEZVOUS_TIMEOUT=3 ";
  const auto r =
      run("(" + common + "RANK=0 " + kProgram + " census & " + common + "RANK=1 " + kProgram +
          " census & " + common + "RANK=2 " + kProgram + " census; wait %1 && wait %2)");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "missing rank 2")) << r.output;
}

TEST(MultiProcess, TwoJobsAtOnceBothSucceed) {
  auto a = std::async(std::launch::async, [] { return run(launch(2, "check")); });
  auto b = std::async(std::launch::async, [] { return run(launch(2, "check")); });
  const auto ra = a.get(), rb = b.get();
  EXPECT_EQ(ra.code, 0) << ra.output;
  EXPECT_EQ(rb.code, 0) << rb.output;
}

TEST(MultiProcess, ShapeMismatchFailsOnEveryRankAndSuggestsPadding) {
  const auto r = run(launch(2, "mismatch"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: gather: ranks hold tensors of different shapes"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: gather: ranks hold tensors of different shapes"))
      << r.output;
}

TEST(MultiProcess, CollectiveTimeoutIsReported) {
  const auto r = run(launch(2, "timeout"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: barrier failed on rank 0")) << r.output;
}

TEST(MultiProcess, LauncherPassesConfigurationWithSources) {
  const std::string path = ::testing::TempDir() + "mp_config.yaml";
  FILE* f = fopen(path.c_str(), "w");
  fputs("num_processes: 2\ngradient_accumulation_steps: 2\nmixed_precision: 'no'\n", f);
  fclose(f);
  const auto r = run(kAccel + " launch --config_file " + path + " --mixed_precision bf16 " +
                     kProgram + " config");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "mixed_precision: bf16")) << r.output;
  EXPECT_TRUE(contains(r.output, "# env ACCELERATE_MIXED_PRECISION")) << r.output;
  EXPECT_TRUE(contains(r.output, "# file " + path + ":2")) << r.output;
}

TEST(MultiProcess, GatherForMetricsCountsEverySampleOnce) {
  // Lengths that divide evenly and lengths that do not, on 2 and 3 processes, split or not. A
  // sanitizer build runs one of each kind (the counting is pure logic, unit-tested in Shard.*).
  std::vector<const char*> cases{"2 metrics 67 8", "3 metrics 2 4", "3 metrics 31 6 split"};
  if (!kSanitized)
    cases.insert(cases.end(),
                 {"2 metrics 64 8", "3 metrics 10 3", "3 metrics 100 7", "2 metrics 10 4 split"});
  for (const char* args : cases) {
    const std::string a = args;
    const auto r =
        run(kAccel + " launch -n " + a.substr(0, 1) + " " + kProgram + " " + a.substr(2));
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "each once")) << args << "\n" << r.output;
  }
}

TEST(MultiProcess, SampleOrderIsTheSameForAnyProcessCount) {
  const auto one = run(launch(1, "order 64"));
  const auto two = run(launch(2, "order 32"));
  const auto four = run(launch(4, "order 16"));
  ASSERT_EQ(one.code, 0) << one.output;
  ASSERT_EQ(two.code, 0) << two.output;
  ASSERT_EQ(four.code, 0) << four.output;
  EXPECT_TRUE(contains(one.output, "epoch 1 step 3:")) << one.output;
  EXPECT_EQ(one.output, two.output);
  EXPECT_EQ(one.output, four.output);
  const auto e0 = one.output.substr(0, one.output.find("epoch 1"));
  const auto e1 = one.output.substr(one.output.find("epoch 1"));
  EXPECT_NE(e0.substr(e0.find(':')), e1.substr(e1.find(':'))) << "a new shuffle each epoch";
}

namespace {
// "param NAME v1 v2 ..." lines of an equiv run.
std::map<std::string, std::vector<double>> params_of(const std::string& output) {
  std::map<std::string, std::vector<double>> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("param ", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    std::string name;
    fields >> name;
    for (double v; fields >> v;) out[name].push_back(v);
  }
  return out;
}
}  // namespace

TEST(MultiProcess, DataParallelEqualsOneProcessWithTheSameGlobalBatch) {
  // fp32, SGD, no dropout, fixed data: 1 x 64, 2 x 32, 1 x 32 x 2 accumulation, 2 x 16 x 2.
  const auto ref = run(launch(1, "equiv 64"));
  ASSERT_EQ(ref.code, 0) << ref.output;
  const auto base = params_of(ref.output);
  ASSERT_EQ(base.size(), 4u) << ref.output;
  // The last two synchronise gradients over the TCP ring and over Gloo instead of shared memory.
  for (const char* cfg : {"2|32|1", "1|32|2", "2|16|2", "2|32|1|tcp", "2|32|1|gloo"}) {
    int n = 0, b = 0, k = 0;
    std::sscanf(cfg, "%d|%d|%d", &n, &b, &k);
    const std::string env = contains(cfg, "tcp")    ? "ACCEL_SHARED_MEMORY_ALLREDUCE=false "
                            : contains(cfg, "gloo") ? "ACCEL_SHARED_MEMORY_ALLREDUCE=false "
                                                      "ACCEL_COLLECTIVE_TRANSPORT=gloo "
                                                    : "";
    const auto r =
        run(env + kAccel + " launch -n " + std::to_string(n) + " --gradient_accumulation_steps " +
            std::to_string(k) + " " + kProgram + " equiv " + std::to_string(b));
    ASSERT_EQ(r.code, 0) << cfg << "\n" << r.output;
    const auto got = params_of(r.output);
    ASSERT_EQ(got.size(), base.size()) << cfg;
    for (const auto& [name, values] : base) {
      double scale = 0, worst = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        scale = std::max(scale, std::abs(values[i]));
        worst = std::max(worst, std::abs(values[i] - got.at(name)[i]));
      }
      EXPECT_LE(worst, 1e-5 * scale) << cfg << " " << name;
    }
  }
}

TEST(MultiProcess, HostModuleDataParallelEqualsOneProcessWithTheSameGlobalBatch) {
  // A torch::nn::Module's own tensors (accel.hpp): 24 steps of 1 x 64 against 2 x 32, the ranks
  // seeded differently before accel_prepare (the program checks every rank agrees bit for bit).
  const auto ref = run(launch_program(1, HOST_MODEL_PROGRAM, "64"));
  ASSERT_EQ(ref.code, 0) << ref.output;
  const auto base = params_of(ref.output);
  ASSERT_EQ(base.size(), 4u) << ref.output;
  const auto two = run(launch_program(2, HOST_MODEL_PROGRAM, "32"));
  ASSERT_EQ(two.code, 0) << two.output;
  const auto got = params_of(two.output);
  ASSERT_EQ(got.size(), base.size()) << two.output;
  for (const auto& [name, values] : base) {
    ASSERT_EQ(got.at(name).size(), values.size()) << name;
    // Relative to the tensor's largest value, as DataParallelEquals... above.
    double scale = 0, worst = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      scale = std::max(scale, std::abs(values[i]));
      worst = std::max(worst, std::abs(values[i] - got.at(name)[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << name;
  }
}

namespace {
// The "norm STEP VALUE" lines of a host_model_program run, in order.
std::vector<double> norms_of(const std::string& output) {
  std::vector<double> norms;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    int step = 0;
    double value = 0;
    if (std::sscanf(line.c_str(), "norm %d %lf", &step, &value) == 2) norms.push_back(value);
  }
  return norms;
}

// Accelerate's launcher's words for ZeRO stage N.
std::string zero_stage(int n) {
  return "ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=" + std::to_string(n) + " ";
}
}  // namespace

TEST(MultiProcess, InterruptEndsAWaitingCollectiveAndLeavesTheGroupUnusable) {
  // Rank 1 is 3 s late; rank 0 is interrupted at 0.3 s, over Gloo (the barrier) and over shared
  // memory (the reduce of a float on one machine).
  for (const char* mode : {"barrier", "reduce"}) {
    const auto r = run("ACCEL_COLLECTIVE_TIMEOUT=20 " + launch_program(2, INTERRUPT_PROGRAM, mode));
    ASSERT_EQ(r.code, 0) << mode << r.output;
    EXPECT_TRUE(contains(r.output, "ACCEL_ERR_CANCELLED")) << r.output;
    EXPECT_TRUE(contains(r.output, "the process group is unusable after an earlier failure"))
        << r.output;
    const auto at = r.output.find("interrupted after ");
    ASSERT_NE(at, std::string::npos) << r.output;
    EXPECT_LT(std::stod(r.output.substr(at + 18)), 1.5) << mode << r.output;
  }
}

TEST(MultiProcess, InterruptEndsADataloadersWaitAndLosesNoBatch) {
  const auto r = run(launch_program(1, INTERRUPT_PROGRAM, "loader"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "after clearing: 0 10")) << r.output;
  const auto at = r.output.find("interrupted after ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_LT(std::stod(r.output.substr(at + 18)), 0.9) << r.output;
}

TEST(MultiProcess, TheProgramsOwnTorchOptimizerIsDataParallelAndZeroRefusesIt) {
  // 24 momentum SGD steps on 2 ranks: the program's own torch::optim::SGD gives bitwise the
  // parameters of libaccel's sgd; under ZeRO stage 1 accel_prepare refuses it, saying why.
  const auto libaccels = run(launch_program(2, HOST_MODEL_PROGRAM, "32"));
  ASSERT_EQ(libaccels.code, 0) << libaccels.output;
  const auto own = run("HOST_MODEL_OWN_OPTIMIZER=1 " + launch_program(2, HOST_MODEL_PROGRAM, "32"));
  ASSERT_EQ(own.code, 0) << own.output;
  EXPECT_EQ(params_of(own.output), params_of(libaccels.output));
  ASSERT_EQ(params_of(own.output).size(), 4u) << own.output;
  const auto zero = run("HOST_MODEL_OWN_OPTIMIZER=1 " + zero_stage(1) +
                        launch_program(2, HOST_MODEL_PROGRAM, "32"));
  EXPECT_NE(zero.code, 0);
  EXPECT_NE(zero.output.find("a program's own torch::optim optimizer steps every parameter"),
            std::string::npos)
      << zero.output;
}

TEST(MultiProcess, ZeroStagesOneToThreeEqualStageZeroAfterFiftyAdamWStepsOnTwoAndFourRanks) {
  // Each rank steps only the parameters it owns (and at stage 2 keeps only their gradients); the
  // clipping norm is over every rank's part; the program checks the ranks agree bit for bit.
  // Stage 2 reduces every micro-step, so it is also run with accumulation against stage 0's.
  // Stage 3 keeps the host's tensors whole on every rank: each step must still bring every rank
  // the owners' new values (it once left them with their owners).
  struct Case {
    int stage, processes;
    std::string extra;
    int steps = 50;
  };
  const std::string accumulate = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 ";
  // A hidden layer of 110000: fc1.weight (8.8 MB) is larger than an exchange chunk and goes
  // alone, from its owner's tensor into the others' (the program prints summaries of it).
  const std::string wide = "HOST_MODEL_HIDDEN=110000 ";
  // bf16 autocast in the forward (the gradients, and so the sharded steps, are fp32 all the same);
  // 10 steps: autocast on a CPU is slow.
  const std::string bf16 = "ACCELERATE_MIXED_PRECISION=bf16 ";
  std::vector<Case> cases{{1, 2, ""}, {2, 2, ""}, {2, 2, accumulate}, {1, 2, wide, 10}, {3, 2, ""}};
  // A sanitizer build's short course: the 4-process runs exercise no other code path of ours, nor
  // does autocast (LibTorch's).
  if (!kSanitized)
    cases.insert(cases.end(), {{2, 2, bf16, 10}, {1, 4, ""}, {2, 4, ""}, {3, 4, ""}});
  std::map<std::string, Result> baselines;  // stage 0's run, by program arguments and environment
  for (const Case& c : cases) {
    const std::string args = std::to_string(64 / c.processes) + " adamw " + std::to_string(c.steps);
    const std::string what = "stage " + std::to_string(c.stage) + " on " +
                             std::to_string(c.processes) + " processes " + c.extra;
    const std::string key = args + c.extra;
    if (!baselines.count(key))
      baselines[key] = run(c.extra + launch_program(c.processes, HOST_MODEL_PROGRAM, args));
    const auto& plain = baselines[key];
    ASSERT_EQ(plain.code, 0) << plain.output;
    const auto sharded =
        run(c.extra + zero_stage(c.stage) + launch_program(c.processes, HOST_MODEL_PROGRAM, args));
    ASSERT_EQ(sharded.code, 0) << what << sharded.output;
    const auto base = params_of(plain.output), got = params_of(sharded.output);
    ASSERT_EQ(base.size(), 4u) << plain.output;
    ASSERT_EQ(got.size(), base.size()) << sharded.output;
    for (const auto& [name, values] : base) {
      ASSERT_EQ(got.at(name).size(), values.size()) << name;
      // Each element within 1e-6 of itself. With accumulation, within 5e-6 of its tensor's
      // largest: stage 2 averages each micro-step and adds the averages, stage 0 adds and averages
      // once, the same sum rounded differently, and 50 AdamW steps magnify that (measured: at
      // most 1.3e-6).
      double largest = 0;
      for (double v : values) largest = std::max(largest, std::abs(v));
      for (size_t i = 0; i < values.size(); ++i)
        ASSERT_LE(std::abs(values[i] - got.at(name)[i]),
                  c.extra != accumulate ? 1e-6 * std::abs(values[i]) + 1e-9 : 5e-6 * largest)
            << name << "[" << i << "], " << what;
    }
    const auto want = norms_of(plain.output), norms = norms_of(sharded.output);
    ASSERT_EQ(norms.size(), want.size()) << what << sharded.output;
    ASSERT_EQ(want.size(), static_cast<size_t>(c.steps)) << plain.output;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(norms[i], want[i], 1e-5 * want[i])
          << "the clipping norm of step " << i << ", " << what;
  }
  // Unused parameters under stage 2: no hang, the used one moves everywhere, the other not.
  const auto unused = run(zero_stage(2) + launch(2, "unused 8"));
  EXPECT_EQ(unused.code, 0) << unused.output;
  EXPECT_TRUE(contains(unused.output, "rank 1: unused parameters handled")) << unused.output;
}

TEST(MultiProcess, ZeroStageThreeEqualsStageZeroAfterFiftyAdamWStepsWhateverTheUnits) {
  // A model of catalogue layers (whose parameters stage 3 releases) under each wrap policy, over
  // shared memory and Gloo (where the next unit is prefetched: in backward under FSDP1's
  // defaults, in both directions under DeepSpeed's), with accumulation and bf16 autocast;
  // save_model's file is stage 0's, byte for byte, where the weights are equal bit for bit.
  struct Case {
    int processes;
    std::string extra;
    int steps = 50;
  };
  const std::string fsdp = "ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=FULL_SHARD ";
  const std::string linear =
      fsdp + "FSDP_AUTO_WRAP_POLICY=TRANSFORMER_BASED_WRAP FSDP_TRANSFORMER_CLS_TO_WRAP=Linear ";
  const std::string size = fsdp + "FSDP_AUTO_WRAP_POLICY=SIZE_BASED_WRAP FSDP_MIN_NUM_PARAMS=500 ";
  const std::string accumulate = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 ";
  const std::string gloo = "ACCEL_SHARED_MEMORY_ALLREDUCE=false ";
  // A sanitizer build's short course: the units under the other policies and on 4 ranks go
  // through the same code (their choice is pure logic), as does autocast (LibTorch's).
  std::vector<Case> cases{{2, linear}, {2, accumulate + linear}, {2, gloo + linear, 20}};
  if (!kSanitized)
    cases.insert(cases.end(), {{2, fsdp},
                               {2, size},
                               {2, zero_stage(3)},
                               {4, linear},
                               {4, zero_stage(3)},
                               {2, gloo + zero_stage(3), 20},
                               {2, "ACCELERATE_MIXED_PRECISION=bf16 " + linear, 10}});
  // Stage 0's run and where it saved, by processes, steps and environment.
  std::map<std::string, Result> baselines;
  std::map<std::string, std::string> base_dirs;
  for (const Case& c : cases) {
    const std::string what = std::to_string(c.processes) + " processes, " + c.extra;
    const std::string settings = c.extra.find(accumulate) == 0 ? accumulate
                                 : c.extra.find("ACCELERATE_MIXED_PRECISION") == 0
                                     ? "ACCELERATE_MIXED_PRECISION=bf16 "
                                     : "";
    const std::string args = std::to_string(64 / c.processes) + " " + std::to_string(c.steps) + " ";
    const std::string key = std::to_string(c.processes) + " " + args + settings;
    // Each baseline saves into a directory of its own.
    if (!baselines.count(key)) {
      const std::string base_dir =
          ::testing::TempDir() + "zero3_model_base" + std::to_string(baselines.size());
      baselines[key] =
          run(settings + launch_program(c.processes, SHARDED_MODEL_PROGRAM, args + base_dir));
      base_dirs[key] = base_dir;
    }
    const auto& plain = baselines[key];
    const std::string dir = ::testing::TempDir() + "zero3_model_";
    ASSERT_EQ(plain.code, 0) << plain.output;
    const auto sharded =
        run(c.extra + launch_program(c.processes, SHARDED_MODEL_PROGRAM, args + dir + "sharded"));
    ASSERT_EQ(sharded.code, 0) << what << sharded.output;
    EXPECT_TRUE(contains(sharded.output, "parameter 'fc1.weight' is not on this rank") ||
                contains(sharded.output, "is not on this rank"))
        << what << sharded.output;
    const auto base = params_of(plain.output), got = params_of(sharded.output);
    ASSERT_EQ(base.size(), 8u) << plain.output;
    ASSERT_EQ(got.size(), base.size()) << sharded.output;
    bool bitwise = true;
    for (const auto& [name, values] : base) {
      ASSERT_EQ(got.at(name).size(), values.size()) << name;
      double largest = 0;
      for (double v : values) largest = std::max(largest, std::abs(v));
      for (size_t i = 0; i < values.size(); ++i) {
        bitwise = bitwise && values[i] == got.at(name)[i];
        ASSERT_LE(std::abs(values[i] - got.at(name)[i]),
                  settings != accumulate ? 1e-6 * std::abs(values[i]) + 1e-9 : 5e-6 * largest)
            << name << "[" << i << "], " << what;
      }
    }
    const auto want = norms_of(plain.output), norms = norms_of(sharded.output);
    ASSERT_EQ(want.size(), static_cast<size_t>(c.steps)) << plain.output;
    ASSERT_EQ(norms.size(), want.size()) << what << sharded.output;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(norms[i], want[i], 1e-5 * want[i])
          << "the clipping norm of step " << i << ", " << what;
    // The weights are stage 0's in their last bit here: so is the file.
    if (settings.empty()) {
      EXPECT_TRUE(bitwise) << what;
      const auto same =
          run("cmp " + base_dirs[key] + "/model.safetensors " + dir + "sharded/model.safetensors");
      EXPECT_EQ(same.code, 0) << what << same.output;
    }
  }
  // A rank leaving while the others gather a unit for the forward: named, over both transports.
  // Under DeepSpeed's units the root holds nothing: the failing gather is inside the TorchScript
  // interpreter, and the error keeps its code through it.
  std::vector<std::string> leaving{linear};
  if (!kSanitized)
    leaving.insert(leaving.end(), {gloo + linear, zero_stage(3), gloo + zero_stage(3)});
  for (const std::string& how : leaving) {
    const auto r = run(
        "SHARDED_LEAVE_AT=2 " + how +
        launch_program(2, SHARDED_MODEL_PROGRAM, "32 10 " + ::testing::TempDir() + "zero3_leave"));
    EXPECT_NE(r.code, 0) << how << r.output;
    EXPECT_TRUE(contains(r.output, "ACCEL_ERR_PEER_FAILED")) << how << r.output;
    EXPECT_TRUE(contains(r.output, "rank 1 (pid")) << how << r.output;
  }
}

TEST(MultiProcess, UnusedParametersNeitherHangNorLoseGradients) {
  const auto r = run(launch(2, "unused 8"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: unused parameters handled")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: unused parameters handled")) << r.output;
}

TEST(MultiProcess, GradientsAreBucketViewsAveragedAcrossAccumulationWindowsAndZeroedInPlace) {
  // 2 ranks and 3 (the average divides by 3 rather than multiplying by a power of two's inverse).
  for (int n : {2, 3}) {
    const auto r = run(launch_program(n, BUCKET_VIEW_PROGRAM, ""));
    EXPECT_EQ(r.code, 0) << r.output;
    for (int rank = 0; rank < n; ++rank)
      EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + ": bucket views hold"))
          << r.output;
  }
  // Over Gloo (the sum, then a division of its own).
  const auto gloo =
      run("ACCEL_SHARED_MEMORY_ALLREDUCE=false " + launch_program(2, BUCKET_VIEW_PROGRAM, ""));
  EXPECT_EQ(gloo.code, 0) << gloo.output;
  EXPECT_TRUE(contains(gloo.output, "rank 1: bucket views hold")) << gloo.output;
}

TEST(MultiProcess, SchedulerStepsOncePerProcessUnlessBatchesAreSplit) {
  // A step schedule halves the rate per scheduler step; 3 optimizer steps.
  EXPECT_TRUE(contains(run(launch(1, "schedcount")).output, "lr after 3 steps: 0.125"));
  EXPECT_TRUE(contains(run(launch(2, "schedcount")).output, "lr after 3 steps: 0.015625"))
      << "2 processes: the schedule advances twice per optimizer step";
  EXPECT_TRUE(contains(run("ACCEL_SPLIT_BATCHES=1 " + launch(2, "schedcount")).output,
                       "lr after 3 steps: 0.125"))
      << "split batches: once per step";
  EXPECT_TRUE(
      contains(run("ACCEL_STEP_SCHEDULER_WITH_OPTIMIZER=0 " + launch(2, "schedcount")).output,
               "lr after 3 steps: 0.125"))
      << "step_scheduler_with_optimizer off: once per call";
}

TEST(MultiProcess, BackwardWithoutAPreparedModelIsAnError) {
  const auto r = run(launch(2, "noprepare"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "no model is prepared")) << r.output;
}

TEST(MultiProcess, SaveModelWritesOnceAndEveryRankWaitsForIt) {
  const std::string dir = ::testing::TempDir() + "mp_save_model";
  const auto r = run("rm -rf " + dir + "; " + launch(3, "savemodel " + dir));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 2: saved model visible")) << r.output;
  const auto files = run("ls " + dir);
  EXPECT_TRUE(contains(files.output, "model-00002-of-00002.safetensors")) << files.output;
  EXPECT_FALSE(contains(files.output, ".tmp")) << files.output;
}

namespace {
// The "step N ..." and "params ..." lines of a resume run, from step `from` on.
std::string resume_lines(const std::string& output, int from) {
  std::istringstream in(output);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    int step = -1;
    if (std::sscanf(line.c_str(), "step %d", &step) == 1 && step >= from) out += line + "\n";
    if (line.rfind("params ", 0) == 0) out += line + "\n";
  }
  return out;
}

// The sample ids of the first `steps` steps logged.
std::vector<int> ids_of(const std::string& output, int steps) {
  std::vector<int> ids;
  std::istringstream in(output);
  int seen = 0;
  for (std::string line; std::getline(in, line) && seen < steps;) {
    const auto at = line.find(" ids");
    if (line.rfind("step ", 0) != 0 || at == std::string::npos) continue;
    std::istringstream f(line.substr(at + 4));
    for (int id; f >> id;) ids.push_back(id);
    ++seen;
  }
  return ids;
}
}  // namespace

TEST(MultiProcess, SaveStateLoadStateResumesBitForBit) {
  for (const std::string precision : {"no", "bf16"}) {
    const std::string dir = ::testing::TempDir() + "resume_" + precision;
    const std::string env = "ACCELERATE_MIXED_PRECISION=" + precision + " ";
    const auto a = run("rm -rf " + dir + "; " + env + launch(2, "resume save " + dir + " 10 20"));
    ASSERT_EQ(a.code, 0) << a.output;
    const auto b = run(env + launch(2, "resume load " + dir + " 10 20"));
    ASSERT_EQ(b.code, 0) << b.output;
    const std::string want = resume_lines(a.output, 10);
    EXPECT_EQ(resume_lines(b.output, 10), want) << precision;
    EXPECT_NE(want.find("step 19 loss"), std::string::npos) << a.output;
    // Negative controls: throwing away any one restored piece breaks equality. They check the
    // test, not a path of ours: a sanitizer build leaves them out.
    if (kSanitized) continue;
    for (const char* skip : {"rng", "optimizer", "scheduler", "data"}) {
      const auto c = run(env + launch(2, "resume load " + dir + " 10 20 " + skip));
      ASSERT_EQ(c.code, 0) << c.output;
      EXPECT_NE(resume_lines(c.output, 10), want) << "skipping " << skip << " changed nothing";
    }
  }
}

TEST(MultiProcess, ResumeOnAnotherProcessCountContinuesTheSampleOrder) {
  const std::string dir = ::testing::TempDir() + "resume_counts";
  const auto a = run("rm -rf " + dir + "; " + launch(2, "resume save " + dir + " 10 11"));
  ASSERT_EQ(a.code, 0) << a.output;
  const auto before = ids_of(a.output, 10);  // 10 steps x 2 ranks x 4 = 80 of 120 samples
  ASSERT_EQ(before.size(), 80u);
  // 40 samples are left in the epoch: 10 steps of 4 on 1 process, 4 steps of 12 on 3.
  for (const auto& [procs, steps] : std::vector<std::pair<int, int>>{{1, 10}, {3, 4}}) {
    const auto b = run(launch(procs, "resume load " + dir + " 10 " + std::to_string(10 + steps)));
    ASSERT_EQ(b.code, 0) << b.output;
    auto all = before;
    const auto after = ids_of(b.output, steps);
    all.insert(all.end(), after.begin(), after.end());
    std::sort(all.begin(), all.end());
    std::vector<int> every(120);
    for (int i = 0; i < 120; ++i) every[i] = i;
    EXPECT_EQ(all, every) << procs << " processes: a sample skipped or repeated\n" << b.output;
  }
}

TEST(MultiProcess, ZeroStateSavedInPartsOrMergedResumesBitForBitAtAnyStageAndProcessCount) {
  // Saved at stage 1 on 2 processes (each rank writes its part of the optimizer state), loaded at
  // stages 1, 0, 2 and 3, and at stage 1 on 3 processes; every continuation equals the one that
  // never stopped.
  const std::string zero1 = zero_stage(1);
  const std::string dir = ::testing::TempDir() + "resume_zero1";
  const auto a = run("rm -rf " + dir + "; " + zero1 + launch(2, "resume save " + dir + " 10 20"));
  ASSERT_EQ(a.code, 0) << a.output;
  const auto files = run("ls " + dir);
  EXPECT_TRUE(contains(files.output, "optimizer_0.rank_1.safetensors")) << files.output;
  EXPECT_FALSE(contains(files.output, "optimizer_0.safetensors")) << files.output;
  const std::string want = resume_lines(a.output, 10);
  EXPECT_NE(want.find("step 19 loss"), std::string::npos) << a.output;
  // A sanitizer build's short course leaves out the runs whose paths another run here takes too:
  // stage 2's load (stage 1's), stage 1 on 3 processes (stage 3's on 3 below), stage 0's load of
  // FULL_SHARD's parts (of stage 1's parts above) and a part of another save (a missing part's
  // refusal, below).
  std::vector<std::string> stages{zero1, std::string(), zero_stage(3)};
  if (!kSanitized) stages.push_back(zero_stage(2));
  for (const std::string& stage : stages) {
    const auto b = run(stage + launch(2, "resume load " + dir + " 10 20"));
    ASSERT_EQ(b.code, 0) << b.output;
    EXPECT_EQ(resume_lines(b.output, 10), want) << (stage.empty() ? "stage 0" : stage);
  }
  // The same state on 3 processes: it loads (each rank keeps its own part) and trains on.
  if (!kSanitized) {
    const auto c = run(zero1 + launch(3, "resume load " + dir + " 10 14"));
    ASSERT_EQ(c.code, 0) << c.output;
    EXPECT_TRUE(contains(c.output, "step 13 loss")) << c.output;
  }
  // FSDP's SHARD_GRAD_OP with FULL_STATE_DICT (FSDP1's default): the parts become stage 0's one
  // file, which stage 0 resumes from bit for bit.
  const std::string full_dir = ::testing::TempDir() + "resume_zero2_full";
  const std::string fsdp = "ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP ";
  const auto e =
      run("rm -rf " + full_dir + "; " + fsdp + launch(2, "resume save " + full_dir + " 10 20"));
  ASSERT_EQ(e.code, 0) << e.output;
  const auto full_files = run("ls " + full_dir);
  EXPECT_TRUE(contains(full_files.output, "optimizer_0.safetensors")) << full_files.output;
  EXPECT_FALSE(contains(full_files.output, ".rank_")) << full_files.output;
  const auto f = run(launch(2, "resume load " + full_dir + " 10 20"));
  ASSERT_EQ(f.code, 0) << f.output;
  EXPECT_EQ(resume_lines(f.output, 10), resume_lines(e.output, 10));
  // FULL_SHARD (stage 3: the parameters gathered to be saved) with SHARDED_STATE_DICT: its
  // continuation is stage 0's, it resumes at stage 0 bit for bit, and at stage 3 on 3 processes.
  const std::string sharded_dir = ::testing::TempDir() + "resume_zero3_sharded";
  const std::string full_shard =
      "ACCELERATE_USE_FSDP=true FSDP_SHARDING_STRATEGY=FULL_SHARD "
      "FSDP_STATE_DICT_TYPE=SHARDED_STATE_DICT ";
  const auto g = run("rm -rf " + sharded_dir + "; " + full_shard +
                     launch(2, "resume save " + sharded_dir + " 10 20"));
  ASSERT_EQ(g.code, 0) << g.output;
  EXPECT_EQ(resume_lines(g.output, 10), want);
  EXPECT_TRUE(contains(run("ls " + sharded_dir).output, "optimizer_0.rank_1.safetensors"));
  if (!kSanitized) {
    const auto h = run(launch(2, "resume load " + sharded_dir + " 10 20"));
    ASSERT_EQ(h.code, 0) << h.output;
    EXPECT_EQ(resume_lines(h.output, 10), want);
  }
  const auto i = run(full_shard + launch(3, "resume load " + sharded_dir + " 10 14"));
  ASSERT_EQ(i.code, 0) << i.output;
  EXPECT_TRUE(contains(i.output, "step 13 loss")) << i.output;
  // A part of another save (of 5 steps) is refused naming it: the manifest's checksum.
  if (!kSanitized) {
    const std::string other = ::testing::TempDir() + "resume_zero1_other";
    const auto o =
        run("rm -rf " + other + "; " + zero1 + launch(2, "resume save " + other + " 5 20") +
            " > /dev/null && cp " + other + "/optimizer_0.rank_1.safetensors " + dir + "/ && " +
            zero1 + launch(2, "resume load " + dir + " 10 20"));
    EXPECT_NE(o.code, 0) << o.output;
    EXPECT_TRUE(contains(o.output, "optimizer_0.rank_1.safetensors' does not match its checksum"))
        << o.output;
  }
  // A missing part is an error naming it, and the run's state is untouched.
  const auto d = run("rm " + dir + "/optimizer_0.rank_1.safetensors; " + zero1 +
                     launch(2, "resume load " + dir + " 10 20"));
  EXPECT_NE(d.code, 0) << d.output;
  EXPECT_TRUE(contains(d.output, "optimizer_0.rank_1.safetensors")) << d.output;
}

TEST(MultiProcess, ARankThatLeavesDuringTheParameterAllGatherIsNamed) {
  // Rank 1 ends before optimizer step 3 of a stage-1 job: rank 0, gathering the parameters after
  // its step, fails at once naming rank 1, over shared memory and over Gloo.
  for (const char* shm : {"true", "false"}) {
    const auto r = run(std::string("HOST_MODEL_LEAVE_AT=3 ACCEL_SHARED_MEMORY_ALLREDUCE=") + shm +
                       " " + zero_stage(1) + launch_program(2, HOST_MODEL_PROGRAM, "32"));
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "ACCEL_ERR_PEER_FAILED: all_gather failed on rank 0"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "rank 1 (pid")) << r.output;
    EXPECT_LT(r.seconds, 30.0) << "not a collective timeout";
  }
}

TEST(MultiProcess, KillingASaveNeverHarmsThePreviousCheckpoint) {
  const std::string dir = ::testing::TempDir() + "crash_ckpt";
  const auto first = run("rm -rf " + dir + "*; " + kProgram + " crashloop " + dir + " 1");
  ASSERT_EQ(first.code, 0) << first.output;
  int refused_partials = 0;
  // A sanitizer build checks the save path's memory and threads; the kill points are the plain
  // build's business.
  const int kills = kSanitized ? 6 : 20;
  for (int i = 0; i < kills; ++i) {
    // Saves run back to back; SIGKILL lands at a random point of one of them.
    const auto r =
        run(kProgram + " crashloop " + dir + " 100000 > /dev/null & pid=$!; sleep 0." +
            std::to_string(60 + (i * 37) % 40) + "; kill -9 $pid; wait $pid; " + kProgram +
            " checkload " + dir + "; echo rc=$?; if [ -d " + dir + ".partial ]; then " + kProgram +
            " checkload " + dir + ".partial; echo partial_rc=$?; fi");
    EXPECT_TRUE(contains(r.output, "loaded\nrc=0")) << "run " << i << ":\n" << r.output;
    // A directory left at .partial is either an unfinished save, refused with a clear error, or the
    // previous checkpoint swapped out just before its removal, complete and verified.
    if (contains(r.output, "partial_rc=3")) {
      EXPECT_TRUE(contains(r.output, "refused: ACCEL_ERR_IO")) << r.output;
      ++refused_partials;
    } else if (contains(r.output, "partial_rc=")) {
      EXPECT_TRUE(contains(r.output, "partial_rc=0")) << r.output;
    }
  }
  std::printf("%d kills: previous checkpoint always loaded; %d partial directories refused\n",
              kills, refused_partials);
}

TEST(MultiProcess, BatchNormBuffersAgreeAcrossRanks) {
  const auto r = run(launch(2, "batchnorm"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: batch-norm buffers and parameters agree")) << r.output;
}

TEST(MultiProcess, TwoMachinesOnOneHost) {
  const std::string port = std::to_string(free_port());
  const std::string flags =
      "--num_machines 2 --main_process_ip 127.0.0.1 --main_process_port " + port;
  auto m0 = std::async(std::launch::async,
                       [&] { return run(launch(4, "check", flags + " --machine_rank 0")); });
  auto m1 = std::async(std::launch::async,
                       [&] { return run(launch(4, "check", flags + " --machine_rank 1")); });
  const auto r0 = m0.get(), r1 = m1.get();
  EXPECT_EQ(r0.code, 0) << r0.output;
  EXPECT_EQ(r1.code, 0) << r1.output;
  EXPECT_TRUE(contains(r1.output, "rank 3 of 4: all collectives OK")) << r1.output;
}

TEST(MultiProcess, PortInUseIsAClearError) {
  Socket taken(true);
  ASSERT_GT(taken.port, 0);
  const auto r = run(launch(2, "check", "--main_process_port " + std::to_string(taken.port)));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "could not open the rendezvous store on port")) << r.output;
}

TEST(MultiProcess, MissingProgramIsAClearError) {
  const auto r = run(kAccel + " launch -n 2 /nonexistent/program");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "/nonexistent/program")) << r.output;
}

TEST(MultiProcess, SigtermIsForwardedAndTheLauncherExits) {
  const std::string log = ::testing::TempDir() + "sigterm.log";
  // A marker argument (mp_program ignores it) keeps other tests' sleeping ranks, which may run
  // at the same time under ctest -j, out of the leftover check below.
  const auto r = run("(" + launch(2, "sleep sigterm-forwarding") + " > " + log +
                     " 2>&1 & pid=$!; " + "for i in $(seq 100); do grep -q 'rank 1 sleeping' " +
                     log + " 2>/dev/null && grep -q 'rank 0 sleeping' " + log +
                     " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo launcher=$?; " +
                     "cat " + log + ")");
  EXPECT_TRUE(contains(r.output, "launcher=143")) << r.output;
  EXPECT_TRUE(contains(r.output, "received Terminated; forwarding it to the ranks")) << r.output;
  EXPECT_LT(r.seconds, 20.0);
  // The bracket keeps pgrep from matching the shell that runs it.
  const std::string name = kProgram.substr(kProgram.rfind('/') + 1);
  const auto left = run("pgrep -f '[" + name.substr(0, 1) + "]" + name.substr(1) +
                        " sleep sigterm-forwarding' || echo none");
  EXPECT_TRUE(contains(left.output, "none")) << "ranks left behind: " << left.output;
}

namespace {

// Processes whose command line is exactly {…/<program>, arg}, read from /proc (so that no shell
// running the search matches itself).
std::vector<pid_t> processes_running(const std::string& program, const std::string& arg) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (!proc) return found;
  while (const dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/cmdline", std::ios::binary);
    std::vector<std::string> argv;
    for (std::string a; std::getline(in, a, '\0');) argv.push_back(a);
    if (argv.size() == 2 && argv[1] == arg && argv[0].size() >= program.size() &&
        argv[0].compare(argv[0].size() - program.size(), program.size(), program) == 0)
      found.push_back(pid);
  }
  closedir(proc);
  return found;
}

// Ranks that run `sleep <arg>`, a command line no other process has; whatever is left of them is
// killed when this goes out of scope, so that a test never leaks them even when it fails.
struct SleepingRanks {
  std::string arg;
  explicit SleepingRanks(const std::string& tag)
      : arg("97." + std::to_string(getpid()) + tag) {}  // `sleep` takes 97.<digits> seconds
  ~SleepingRanks() {
    for (pid_t pid : processes_running("sleep", arg)) kill(pid, SIGKILL);
  }
  // Those still running once the launcher has exited; it reaps them before it exits, but give
  // them a moment all the same.
  std::vector<pid_t> left() const {
    std::vector<pid_t> now = processes_running("sleep", arg);
    for (int i = 0; i < 30 && !now.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now = processes_running("sleep", arg);
    }
    return now;
  }
};

// The number in "stopped the N ranks already started", or -1.
int ranks_stopped(const std::string& output) {
  const std::string key = "stopped the ";
  const auto at = output.find(key);
  return at == std::string::npos ? -1 : std::atoi(output.c_str() + at + key.size());
}

}  // namespace

// --prefix_output takes two pipes per rank. When pipe2 fails for a later rank, the ranks already
// started are killed and reaped and the error is reported: the launcher leaves none behind.
TEST(MultiProcess, RanksAlreadyStartedAreStoppedWhenALaterRankCannotStart) {
  SleepingRanks ranks("1");
  // Before the first rank the launcher holds fds 0-2, the port it reserves and its signalfd (3,
  // 4). Each rank opens two pipes and keeps their read ends, so rank i's second pipe needs fds up
  // to 8 + 2i: under `ulimit -n 20`, ranks 0-5 start and rank 6's pipe2 fails with EMFILE. Fds from
  // 3 up that the launcher would inherit from here are closed first, so that this count holds.
  const auto r = run("( ulimit -n 20; for fd in $(seq 3 19); do eval \"exec $fd>&-\"; done; exec " +
                     kAccel + " launch -n 16 --prefix_output sleep " + ranks.arg + " )");
  const auto left = ranks.left();
  EXPECT_TRUE(left.empty()) << left.size() << " ranks left running\n" << r.output;
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "accel launch: could not start rank ")) << r.output;
  EXPECT_TRUE(contains(r.output, "pipe: Too many open files")) << r.output;
  // Several ranks were running when the failure came (6 with the fds counted above).
  EXPECT_GE(ranks_stopped(r.output), 3) << r.output;
  EXPECT_LT(ranks_stopped(r.output), 16) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
}

// fork() made to fail (fail_fork.so, preloaded) from the N-th call on. For the first rank, the
// launch fails instead of succeeding with no rank run; for a later one, the ranks already started
// are stopped and reaped and the launcher names the rank that could not be started.
TEST(MultiProcess, ForkFailureFailsTheLaunchAndLeavesNoRankBehind) {
  for (const char* at : {"1", "4"}) {
    SleepingRanks ranks(std::string("2") + at);
    const auto r = run("FAIL_FORK_AT=" + std::string(at) + " LD_PRELOAD=" + kFailFork + " " +
                       kAccel + " launch -n 6 --prefix_output sleep " + ranks.arg);
    const auto left = ranks.left();
    EXPECT_TRUE(left.empty()) << left.size() << " ranks left running\n" << r.output;
    EXPECT_EQ(r.code, 1) << "fork fails at call " << at << "\n" << r.output;
    const int first_failing = std::atoi(at) - 1;
    EXPECT_TRUE(contains(r.output, "accel launch: could not start rank " +
                                       std::to_string(first_failing) + ": fork: "))
        << r.output;
    if (first_failing > 0) {
      EXPECT_EQ(ranks_stopped(r.output), first_failing) << r.output;
    }
    EXPECT_LT(r.seconds, 20.0) << r.output;
  }
}

TEST(MultiProcess, LoneRankFailsAtItsRendezvousDeadlineSayingHowLongItWaited) {
  // One deadline for the whole rendezvous: rank 1 of 2 with no rank 0 waits T, not T twice; and
  // rank 0 alone, hosting the store, fails at the same deadline. Timed around accel_init inside
  // the program, so that a slow process start (LibTorch under a sanitizer) does not count.
  const std::string common =
      "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
      " ACCEL_RENDEZVOUS_TIMEOUT=3 ";
  for (const char* rank : {"1", "0"}) {
    SCOPED_TRACE(std::string("rank ") + rank);
    const auto r = run(common + "RANK=" + rank + " " + kProgram + " lone");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, rank[0] == '1'
                                       ? "for 3 s (rendezvous_timeout)"
                                       : "did not arrive within 3 s (rendezvous_timeout)"))
        << r.output;
    const auto at = r.output.find("failed after ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const double seconds = std::atof(r.output.c_str() + at + 13);
    EXPECT_GE(seconds, 2.9) << r.output;
    EXPECT_LT(seconds, 4.0) << r.output;
  }
}

TEST(MultiProcess, DeadPeerIsNamedWithItsHostWithoutTheLauncher) {
  // As torchrun, mpirun or srun start ranks: from the environment alone, no launcher to say who
  // died. The survivor's own message names the rank, its pid and its host.
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  for (const char* shm : {"1", "0"}) {
    SCOPED_TRACE(std::string("shared memory ") + shm);
    const std::string common =
        "WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
        std::to_string(free_port()) + " ACCEL_SHARED_MEMORY_ALLREDUCE=" + shm + " ";
    const auto r = run("(" + common + "RANK=0 LOCAL_RANK=0 " + kProgram + " die & " + common +
                       "RANK=1 LOCAL_RANK=1 " + kProgram + " die; wait %1)");
    EXPECT_EQ(r.code, 4) << r.output;
    EXPECT_TRUE(contains(r.output, "rank 1 (pid ")) << r.output;
    EXPECT_TRUE(contains(r.output, std::string("on host ") + host + ") has exited")) << r.output;
  }
}

namespace {

// Runs `parent` (a command that starts two `mp_program sleep` ranks as its children; its output
// goes to a file) in the background, waits until both ranks sleep, SIGKILLs the parent, and 2 s
// later lists the ranks it had and every process still alive among them or in their process
// groups (by group, not by name: other tests run the same program at the same time). A zombie is
// dead: it holds no memory or port and waits only for the orphan reaper (PID 1 in a container may
// reap late, or one child per SIGCHLD), so it is not counted.
struct AfterParentKill {
  std::vector<std::string> ranks;
  std::string survivors;
  std::string output;
};

AfterParentKill kill_parent_of_sleeping_ranks(const std::string& parent, const std::string& tag) {
  const std::string log = ::testing::TempDir() + tag + "_output";
  std::remove(log.c_str());
  const auto r = run(parent + " > " + log + " 2>&1 & parent=$!\n" +
                     "for i in $(seq 100); do [ \"$(grep -c sleeping " + log +
                     ")\" = 2 ] && break; sleep 0.1; done\n"
                     "ranks=$(pgrep -P $parent | tr '\\n' ' ')\n"
                     "echo \"ranks: $ranks\"\n"
                     "kill -KILL $parent; sleep 2\n"
                     "for p in $ranks; do ps -o pid=,stat= -p $p; pgrep -g $p | xargs -r ps"
                     " -o pid=,stat= -p; done | awk '$2 !~ /^Z/ {print \"survivor: \" $1}'\n"
                     "true");
  AfterParentKill out;
  out.output = r.output;
  const auto at = r.output.find("ranks: ");
  if (at != std::string::npos) {
    std::istringstream pids(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
    for (std::string pid; pids >> pid;) out.ranks.push_back(pid);
  }
  for (size_t p = r.output.find("survivor: "); p != std::string::npos;
       p = r.output.find("survivor: ", p + 1))
    out.survivors += r.output.substr(p, r.output.find('\n', p) - p) + "; ";
  return out;
}

}  // namespace

TEST(MultiProcess, LauncherKilledBySigkillTakesItsRanksWithIt) {
  // SIGKILL cannot be forwarded: the ranks must notice their launcher's death themselves.
  const auto after =
      kill_parent_of_sleeping_ranks(launch(2, "sleep", "--prefix_output"), "sigkill");
  EXPECT_EQ(after.ranks.size(), 2u) << after.output;
  EXPECT_EQ(after.survivors, "") << after.output;
}

TEST(MultiProcess, RanksOfAnotherEngineDieWithIt) {
  // Ranks started from the environment by an engine (torchrun here, by its variable) must not
  // outlive it either: a shell stands in for the engine and is SIGKILLed.
  const std::string common = "TORCHELASTIC_RUN_ID=fault WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 " +
                             std::string("MASTER_PORT=") + std::to_string(free_port()) + " ";
  const auto after =
      kill_parent_of_sleeping_ranks("bash -c '" + common + "RANK=0 " + kProgram + " sleep & " +
                                        common + "RANK=1 " + kProgram + " sleep & wait'",
                                    "engine");
  EXPECT_EQ(after.ranks.size(), 2u) << after.output;
  EXPECT_EQ(after.survivors, "") << after.output;
}

TEST(MultiProcess, ConfigDefaultWritesWhatYaml11ReadersReadBack) {
  // PyYAML (so Python Accelerate's loader) reads an unquoted NO as the boolean false.
  const std::string file = ::testing::TempDir() + "default_config_written.yaml";
  std::remove(file.c_str());
  const auto written = run(kAccel + " config default --config_file " + file);
  ASSERT_EQ(written.code, 0) << written.output;
  const auto shown = run(kAccel + " config show --config_file " + file);
  EXPECT_EQ(shown.code, 0) << shown.output;
  EXPECT_TRUE(contains(shown.output, "distributed_type: 'NO'")) << shown.output;
  // PyYAML is Debian's python3-yaml, which python3-torch (tools/setup.sh) brings.
  const auto py = run("/usr/bin/python3 -c \"import yaml; d = yaml.safe_load(open('" + file +
                      "')); print(repr(d['distributed_type']), repr(d['mixed_precision']))\"");
  EXPECT_TRUE(contains(py.output, "'NO' 'no'")) << py.output;
}

TEST(MultiProcess, AccelTestChecksTheConfiguredSetupAndNamesWhatFails) {
  const std::string good = ::testing::TempDir() + "accel_test_bf16.yaml";
  {
    std::ofstream f(good);
    f << "distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: bf16\nuse_cpu: true\n";
  }
  const auto ok = run(kAccel + " test --config_file " + good);
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "2 processes (MULTI_CPU), mixed precision bf16")) << ok.output;
  for (const char* check : {"[ok] collectives", "[ok] training", "[ok] checkpoint"})
    EXPECT_TRUE(contains(ok.output, check)) << check << "\n" << ok.output;
  EXPECT_TRUE(contains(ok.output, "Test is a success!")) << ok.output;

  const std::string bad = ::testing::TempDir() + "accel_test_fp16.yaml";
  {
    std::ofstream f(bad);
    f << "distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: fp16\nuse_cpu: true\n";
  }
  const auto failed = run(kAccel + " test --config_file " + bad);
  EXPECT_NE(failed.code, 0) << failed.output;
  EXPECT_TRUE(contains(failed.output, "fp16 (file " + bad + ":3) needs a CUDA device"))
      << failed.output;
  EXPECT_TRUE(contains(failed.output, "accel test: failed")) << failed.output;
}

// Accelerate's logger on 3 ranks: a main-process-only message once, every rank's with its rank,
// in-order rounds in rank order although later ranks arrive first, a debug message dropped; then
// the level from ACCELERATE_LOG_LEVEL on every rank.
TEST(MultiProcess, LoggerWritesOncePerJobEveryRankWithItsRankAndInRankOrder) {
  const auto r = run(launch_program(3, LOG_PROGRAM, ""));
  ASSERT_EQ(r.code, 0) << r.output;
  auto count = [&](const std::string& part) {
    size_t n = 0;
    for (size_t at = r.output.find(part); at != std::string::npos; at = r.output.find(part, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("INFO: once per job\n"), 1u) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(count("WARNING [rank " + std::to_string(rank) + "/3]: every rank\n"), 1u) << r.output;
  for (int round = 0; round < 3; ++round) {
    size_t last = 0;
    for (int rank = 0; rank < 3; ++rank) {
      const std::string line =
          "INFO [rank " + std::to_string(rank) + "/3]: round " + std::to_string(round) + "\n";
      const size_t at = r.output.find(line);
      ASSERT_NE(at, std::string::npos) << line << r.output;
      EXPECT_GE(at, last) << line << " before the rank ahead of it\n" << r.output;
      last = at;
    }
  }
  EXPECT_EQ(count("hidden below info"), 0u) << r.output;

  const auto quiet = run("ACCELERATE_LOG_LEVEL=error " + launch_program(3, LOG_PROGRAM, ""));
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_FALSE(contains(quiet.output, "once per job")) << quiet.output;
  EXPECT_FALSE(contains(quiet.output, "every rank")) << quiet.output;
  EXPECT_FALSE(contains(quiet.output, "round")) << quiet.output;
}

// Accelerate 1.15's split_between_processes on 3 ranks (padding up to ceil(n / P) with the input's
// last item, none when P divides n; a rank past the end takes nothing; tensors as lists), and a
// trigger raised by rank 2 from another thread while its main thread waits in a
// collective: every rank stops at the same step.
TEST(TextData, SplitBetweenProcessesAndTheTriggerOnThreeRanks) {
  const auto r = run(launch_program(3, TEXT_PROGRAM, "inference"));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* line :
       {"rank 0: list of 3: 0\n", "rank 1: list of 3: 1\n", "rank 2: list of 3: 2\n",
        "rank 0: list of 3 padded: 0\n", "rank 2: list of 3 padded: 2\n",
        "rank 0: list of 4 padded: 0 1\n", "rank 1: list of 4 padded: 2 3\n",
        "rank 2: list of 4 padded: 3 3\n", "rank 1: list of 2: 1\n", "rank 2: list of 2:\n",
        "rank 0: tensor of 5: 0 1\n", "rank 1: tensor of 5: 2 3\n", "rank 2: tensor of 5: 4\n",
        "rank 2: tensor of 5 padded: 4 4\n", "rank 0: unsharded loader read 5 samples\n",
        "rank 2: unsharded loader read 5 samples\n", "rank 0: trigger stopped the loop at step 3\n",
        "rank 1: trigger stopped the loop at step 3\n",
        "rank 2: trigger stopped the loop at step 3\n"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
}

// Ragged token batches, padded to each rank's own longest (a multiple of 4) and grouped by length:
// a masked per-sentence loss gives 1 x 64 and 2 x 32 the same losses and parameters.
TEST(TextData, RaggedMaskedBatchesOnTwoProcessesEqualOneProcess) {
  auto values = [](const std::string& output, const std::string& rank) {
    std::map<std::string, double> v;
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(rank, 0) != 0) continue;
      const auto space = line.rfind(' ');
      v[line.substr(rank.size(), space - rank.size())] = std::stod(line.substr(space + 1));
    }
    return v;
  };
  const auto one = run(launch_program(1, TEXT_PROGRAM, "ragged 64"));
  ASSERT_EQ(one.code, 0) << one.output;
  const auto two = run(launch_program(2, TEXT_PROGRAM, "ragged 32"));
  ASSERT_EQ(two.code, 0) << two.output;
  const auto base = values(one.output, "rank 0: ");
  ASSERT_EQ(base.size(), 6u) << one.output;
  for (const char* rank : {"rank 0: ", "rank 1: "}) {
    const auto got = values(two.output, rank);
    ASSERT_EQ(got.size(), base.size()) << two.output;
    for (const auto& [key, value] : base)
      EXPECT_NEAR(got.at(key), value, 1e-5 * std::max(1.0, std::abs(value))) << rank << key;
  }
}

// Streams on 3 real processes, both semantics, with and without a reading thread: the batches are
// those of the stream rules, which tests/unit checks against Accelerate's own code. A stream
// failing on the main process fails the call on every rank (none waits forever), and the next call
// goes on from the batch that failed.
TEST(TextData, StreamsShardedAndDispatchedOnThreeRanks) {
  const auto r = run(launch_program(3, TEXT_PROGRAM, "stream"));
  ASSERT_EQ(r.code, 0) << r.output;
  const int configs[][5] = {{11, 2, 0, 0, 1}, {11, 2, 0, 0, 0}, {10, 3, 0, 1, 1}, {10, 3, 0, 1, 0},
                            {13, 6, 1, 0, 1}, {13, 6, 1, 0, 0}, {2, 2, 0, 0, 1},  {2, 2, 0, 0, 0}};
  for (const auto& k : configs)
    for (int rank = 0; rank < 3; ++rank) {
      accel::data::StreamSpec spec;
      spec.batch_size = k[1];
      spec.num_processes = 3;
      spec.process_index = rank;
      spec.split_batches = k[2];
      spec.drop_last = k[3];
      spec.dispatch = k[4];
      std::string line = "rank " + std::to_string(rank) + ": stream";
      for (int v : k) line += " " + std::to_string(v);
      line += ": ";
      const auto batches = accel::data::stream_epoch(spec, k[0]);
      for (size_t b = 0; b < batches.size(); ++b)
        for (size_t i = 0; i < batches[b].size(); ++i)
          line += (i ? " " : b ? "|" : "") + std::to_string(batches[b][i]);
      EXPECT_TRUE(contains(r.output, line + "\n")) << line << "\n" << r.output;
    }
  for (const char* line :
       {"rank 0: dispatched failure: ACCEL_ERR_CALLBACK",
        "rank 1: dispatched failure: ACCEL_ERR_CALLBACK",
        "rank 2: dispatched failure: ACCEL_ERR_CALLBACK", "rank 0: after the failure: 6 7\n",
        "rank 1: after the failure: 8 9\n", "rank 2: after the failure: 10 11\n"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
}

// join_uneven_inputs with even_batches turned off inside it: 10 samples, 2 per rank per step, so
// rank 0 makes a third step alone while rank 1, out of batches, answers its gradient all-reduce
// with zeros. Both end with the parameters of one process whose third step is halved (Join divides
// by the number of processes), and nobody hangs.
TEST(TextData, JoinUnevenInputsKeepsTheLastRankTrainingAndEveryoneAgrees) {
  const auto ref = run(launch_program(1, TEXT_PROGRAM, "join"));
  ASSERT_EQ(ref.code, 0) << ref.output;
  const auto two = run(launch_program(2, TEXT_PROGRAM, "join"));
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_TRUE(contains(two.output, "rank 0: 3 steps")) << two.output;
  EXPECT_TRUE(contains(two.output, "rank 1: 2 steps")) << two.output;
  for (const char* name : {"fc.weight", "fc.bias"}) {
    const std::string key = std::string("rank 0: ") + name + " ";
    const auto at = ref.output.find(key);
    ASSERT_NE(at, std::string::npos) << ref.output;
    const std::string values =
        ref.output.substr(at + key.size(), ref.output.find('\n', at) - at - key.size());
    for (const char* rank : {"rank 0: ", "rank 1: "})
      EXPECT_TRUE(contains(two.output, rank + std::string(name) + " " + values + "\n"))
          << rank << name << " " << values << "\n"
          << two.output;
  }
}
