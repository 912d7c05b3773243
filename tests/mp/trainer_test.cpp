// The Trainer (accel_trainer_*) on real processes over Gloo: bitwise the hand-written loop on 1
// and 2 processes, the logged loss as the window's mean over ranks, the callback events in
// transformers' order, and predict giving every sample once, in order, on 1, 2 and 3 processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace {

using mp_test::run;

const std::string kCli = ACCEL_CLI;
const std::string kProgram = TRAINER_PROGRAM;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Python's round(v, 4) is what the Trainer logs; the recomputed mean is compared after it.
double round4(double v) {
  return std::nearbyint(v * 10000) / 10000;
}

// The runs every TrainerRuns test reads, made once by the first (a failure fails that test, and
// the others then fail on the files it did not write).
class TrainerRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dir_.empty()) return;
    dir_ = ::testing::TempDir() + "trainer_mp_" + std::to_string(getpid());
    ASSERT_EQ(run("rm -rf " + dir_ + " && mkdir -p " + dir_).code, 0);
    for (int n : {1, 2}) {
      const std::string base = dir_ + "/n" + std::to_string(n);
      ASSERT_EQ(run("mkdir -p " + base + "/hand " + base + "/trainer").code, 0);
      const std::string launch = kCli + " launch -n " + std::to_string(n) + " " + kProgram;
      const auto hand = run(launch + " hand " + base + "/hand 2 300");
      ASSERT_EQ(hand.code, 0) << hand.output;
      const auto trainer =
          run(launch + " trainer " + base + "/trainer 2 'max_steps=300,logging_steps=10," +
              "save_strategy=no,speed_metrics=false,output_dir=" + base + "/run'");
      ASSERT_EQ(trainer.code, 0) << trainer.output;
    }
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) run("rm -rf " + dir_);
  }
  static std::string dir_;
};
std::string TrainerRuns::dir_;

TEST_F(TrainerRuns, ParametersAreBitwiseTheHandWrittenLoopsOn1And2Processes) {
  for (const char* n : {"n1", "n2"}) {
    const std::string base = dir_ + "/" + n;
    const auto cmp = run("cmp " + base + "/hand/model/model.safetensors " + base +
                         "/trainer/model/model.safetensors");
    EXPECT_EQ(cmp.code, 0) << n << ": " << cmp.output;
  }
  // And the runs did train: 1 and 2 processes see different batches, so they differ.
  EXPECT_NE(run("cmp -s " + dir_ + "/n1/hand/model/model.safetensors " + dir_ +
                "/n2/hand/model/model.safetensors")
                .code,
            0);
}

// Each rank's window: the micro-batch losses since its last log, each divided by the
// accumulation in fp32 and summed in fp32 (transformers' tr_loss); the log is the fp32 mean of
// the ranks' sums over the steps since the last log, rounded to 4 places.
TEST_F(TrainerRuns, LoggedLossIsTheMeanOverRanksOfTheWindowWithin1e7) {
  for (int n : {1, 2}) {
    std::vector<std::vector<float>> sums(n);
    std::vector<std::vector<std::pair<long, double>>> logs(n);
    for (int r = 0; r < n; ++r) {
      float sum = 0;
      for (const auto& line : lines_of(dir_ + "/n" + std::to_string(n) + "/trainer/trace_" +
                                       std::to_string(r) + ".txt")) {
        std::istringstream in(line);
        std::string kind;
        in >> kind;
        if (kind == "micro") {
          float loss = 0;
          in >> loss;
          sum += loss / 2.0f;
        } else {
          long step = 0;
          double logged = 0;
          in >> step >> logged;
          logs[r].emplace_back(step, logged);
          sums[r].push_back(sum);
          sum = 0;
        }
      }
    }
    ASSERT_EQ(logs[0].size(), 30u) << "a log every 10 of 300 steps";
    for (size_t k = 0; k < logs[0].size(); ++k) {
      EXPECT_EQ(logs[0][k].first, static_cast<long>(10 * (k + 1)));
      float mean = 0;
      for (int r = 0; r < n; ++r) mean += sums[r][k];
      mean /= static_cast<float>(n);
      const double want = round4(static_cast<double>(mean) / 10.0);
      for (int r = 0; r < n; ++r)
        EXPECT_NEAR(logs[r][k].second, want, 1e-7) << n << " processes, log " << k;
    }
  }
}

TEST_F(TrainerRuns, EventsComeInTransformersOrder) {
  const auto events = lines_of(dir_ + "/n1/trainer/events_0.txt");
  ASSERT_GT(events.size(), 10u);
  // One optimizer step of two micro-batches, as transformers' loop raises its events.
  const std::vector<std::string> first = {
      "on_init_end 0",       "on_train_begin 0", "on_epoch_begin 0",
      "on_step_begin 0",     "on_substep_end 0", "on_pre_optimizer_step 0",
      "on_optimizer_step 0", "on_step_end 1",    "on_step_begin 1"};
  EXPECT_EQ(std::vector<std::string>(events.begin(), events.begin() + first.size()), first);
  // 96 samples in batches of 4 with 2 per step: 12 steps an epoch, 25 epochs for 300 steps.
  size_t epochs = 0, logs = 0;
  for (const auto& e : events) {
    epochs += e.rfind("on_epoch_end ", 0) == 0;
    logs += e.rfind("on_log ", 0) == 0;
  }
  EXPECT_EQ(epochs, 25u);
  EXPECT_EQ(logs, 31u) << "30 loss logs and the train metrics";
  const std::vector<std::string> last = {"on_step_end 300", "on_log 300", "on_epoch_end 300",
                                         "on_log 300", "on_train_end 300"};
  EXPECT_EQ(std::vector<std::string>(events.end() - last.size(), events.end()), last);
  // trainer_state.json: transformers' fields, the log history with the final train_loss.
  const auto state = lines_of(dir_ + "/n1/trainer/trainer_state.json");
  std::string text;
  for (const auto& l : state) text += l + "\n";
  EXPECT_NE(text.find("\"global_step\": 300,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"train_loss\": "), std::string::npos) << text;
  EXPECT_EQ(text.find("train_runtime"), std::string::npos) << "speed_metrics=false";
}

TEST(TrainerPredict, EverySampleOnceInOrderOn1To3Processes) {
  const std::string dir = ::testing::TempDir() + "trainer_predict_" + std::to_string(getpid());
  for (int n : {1, 2, 3}) {
    ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir).code, 0);
    const auto r =
        run(kCli + " launch -n " + std::to_string(n) + " " + kProgram + " predict " + dir);
    ASSERT_EQ(r.code, 0) << r.output;
    for (int rank = 0; rank < n; ++rank) {
      const auto got = lines_of(dir + "/predict_" + std::to_string(rank) + ".txt");
      ASSERT_EQ(got.size(), 23u) << n << " processes, rank " << rank;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], std::to_string(i)) << i;
    }
  }
  run("rm -rf " + dir);
}

}  // namespace

namespace {

// SIGKILL inside step 138's accumulation window (mid-window for logging every 10), resume from
// the latest checkpoint (125): the parameters, the final trainer_state.json (log history, the
// train loss) and every later checkpoint's trainer_state.json are the uninterrupted run's, byte
// for byte, on 1 and on 2 processes.
TEST(TrainerResume, KilledAtStep137ResumesBitwiseFromTheLatestCheckpoint) {
  const std::string dir = ::testing::TempDir() + "trainer_resume_" + std::to_string(getpid());
  const std::string settings = "max_steps=300,logging_steps=10,save_steps=25,speed_metrics=false";
  for (int n : {1, 2}) {
    ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir + "/a " + dir + "/b").code, 0);
    const std::string launch = kCli + " launch -n " + std::to_string(n) + " " + kProgram;
    const auto whole =
        run(launch + " trainer " + dir + "/a 2 '" + settings + ",output_dir=" + dir + "/a/run'");
    ASSERT_EQ(whole.code, 0) << whole.output;
    const auto killed = run("TRAINER_KILL_AT=137 " + launch + " trainer " + dir + "/b 2 '" +
                            settings + ",output_dir=" + dir + "/b/run'");
    ASSERT_NE(killed.code, 0) << killed.output;
    EXPECT_EQ(run("test -d " + dir + "/b/run/checkpoint-125").code, 0);
    EXPECT_NE(run("test -d " + dir + "/b/run/checkpoint-150").code, 0) << "killed before 150";
    const auto resumed = run(launch + " trainer " + dir + "/b 2 '" + settings +
                             ",output_dir=" + dir + "/b/run,resume_from_checkpoint=latest'");
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from '" + dir + "/b/run/checkpoint-125' at step 125"),
              std::string::npos)
        << resumed.output;
    for (const std::string f :
         {"model/model.safetensors", "trainer_state.json", "run/checkpoint-150/trainer_state.json",
          "run/checkpoint-300/trainer_state.json", "run/checkpoint-300/model_0.safetensors",
          "run/checkpoint-300/optimizer_0.safetensors"})
      EXPECT_EQ(run("cmp " + dir + "/a/" + f + " " + dir + "/b/" + f).code, 0)
          << n << " processes: " << f;
  }
  run("rm -rf " + dir);
}

}  // namespace

namespace {

// A scripted metric (lower is better) 0.5, 0.3, 0.45, 0.31, 0.6 every 5 steps, patience 3 and
// threshold 0.02: transformers' EarlyStoppingCallback stops at the fifth evaluation (step 25).
// The best (checkpoint-10) survives save_total_limit=2 beside the newest, load_best_model_at_end
// restores its parameters bitwise, and a standalone evaluate() on them gives the step-10
// evaluation's loss exactly.
TEST(TrainerBest, EarlyStoppingKeepsAndRestoresTheBestCheckpoint) {
  const std::string dir = ::testing::TempDir() + "trainer_best_" + std::to_string(getpid());
  ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir).code, 0);
  const auto r = run("TRAINER_SCORES=0.5,0.3,0.45,0.31,0.6,0.1,0.1 " + kCli + " launch -n 2 " +
                     kProgram + " early " + dir +
                     " 2 'max_steps=100,logging_steps=5,eval_strategy=steps,eval_steps=5,"
                     "save_steps=5,metric_for_best_model=score,greater_is_better=false,"
                     "early_stopping_patience=3,early_stopping_threshold=0.02,"
                     "load_best_model_at_end=true,save_total_limit=2,speed_metrics=false,"
                     "output_dir=" +
                     dir + "/run'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(run("ls " + dir + "/run").output, "checkpoint-10\ncheckpoint-25\n");
  std::string state;
  for (const auto& l : lines_of(dir + "/trainer_state.json")) state += l + "\n";
  EXPECT_NE(state.find("\"global_step\": 25,"), std::string::npos) << state;
  EXPECT_NE(state.find("\"best_metric\": 0.3,"), std::string::npos) << state;
  EXPECT_NE(state.find("\"best_model_checkpoint\": \"" + dir + "/run/checkpoint-10\""),
            std::string::npos)
      << state;
  EXPECT_EQ(run("cmp " + dir + "/model/model.safetensors " + dir +
                "/run/checkpoint-10/model_0.safetensors")
                .code,
            0);
  // The step-10 evaluation's eval_loss, as the state records it, and the standalone one's.
  const auto at10 = state.find("\"eval_score\": 0.3,");
  ASSERT_NE(at10, std::string::npos);
  const auto loss_at = state.rfind("\"eval_loss\": ", at10);
  const std::string logged = state.substr(loss_at + 13, state.find(',', loss_at) - loss_at - 13);
  std::string standalone;
  for (const auto& l : lines_of(dir + "/evaluate.txt"))
    if (l.rfind("eval_loss ", 0) == 0) standalone = l.substr(10);
  ASSERT_FALSE(standalone.empty());
  EXPECT_EQ(std::stod(standalone), std::stod(logged)) << standalone << " vs " << logged;
  run("rm -rf " + dir);
}

}  // namespace

namespace {

std::vector<double> numbers_after_name(const std::string& path) {
  std::vector<double> out;
  for (const auto& l : lines_of(path)) out.push_back(std::stod(l.substr(l.rfind(' ') + 1)));
  return out;
}

// num_items_in_batch on ragged text (3 to 20 tokens, labels padded with -100): the loss summed
// over tokens and divided by the label tokens of the whole window over every rank, so that
// 1 process x 64, 2 x 32 and 1 x 16 with 4 accumulation steps train alike: logged losses and
// parameters within 1e-5 (transformers' promise for its num_items_in_batch).
TEST(TrainerRagged, OneBy64IsTwoBy32IsOneBy16AccumulatingFour) {
  const std::string dir = ::testing::TempDir() + "trainer_ragged_" + std::to_string(getpid());
  struct Config {
    int processes, accumulation, batch;
  };
  std::vector<std::vector<double>> params, logs;
  for (const Config c : {Config{1, 1, 64}, Config{2, 1, 32}, Config{1, 4, 16}}) {
    ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir).code, 0);
    const auto r =
        run(kCli + " launch -n " + std::to_string(c.processes) + " " + kProgram + " ragged " + dir +
            " " + std::to_string(c.accumulation) + " " + std::to_string(c.batch));
    ASSERT_EQ(r.code, 0) << r.output;
    params.push_back(numbers_after_name(dir + "/params_0.txt"));
    logs.push_back(numbers_after_name(dir + "/trace_0.txt"));
  }
  ASSERT_EQ(logs[0].size(), 4u) << "4 steps of 64 sequences, a log each";
  for (size_t k = 1; k < params.size(); ++k) {
    ASSERT_EQ(params[k].size(), params[0].size());
    double worst = 0;
    for (size_t i = 0; i < params[0].size(); ++i)
      worst = std::max(worst, std::fabs(params[k][i] - params[0][i]));
    EXPECT_LE(worst, 1e-5) << "configuration " << k;
    ASSERT_EQ(logs[k].size(), logs[0].size());
    for (size_t i = 0; i < logs[0].size(); ++i)
      EXPECT_NEAR(logs[k][i], logs[0][i], 1e-5) << "configuration " << k << ", log " << i;
  }
  // And the steps moved the parameters (SGD, lr 0.5): the comparison is not of initial values.
  EXPECT_GT(std::fabs(logs[0].back() - logs[0].front()), 0.05);
  run("rm -rf " + dir);
}

}  // namespace

namespace {

// Resumed on another number of processes: the 2-process run (4 a process) killed inside step
// 138, resumed from checkpoint-125 on 1 process of 8 (the same global batch, the same samples per
// step; a constant schedule, since the accelerator steps a schedule once per process): the
// parameters agree with the uninterrupted 2-process run's within the fp32 floor (relative 1e-6 of
// the largest), and the logged losses at their 4 places.
TEST(TrainerResume, OnAnotherNumberOfProcessesWithinTheFp32Floor) {
  const std::string dir = ::testing::TempDir() + "trainer_resume_n_" + std::to_string(getpid());
  const std::string settings = "max_steps=300,logging_steps=10,save_steps=25,speed_metrics=false";
  ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir + "/a " + dir + "/b").code, 0);
  const std::string env = "TRAINER_CONSTANT_LR=1 ";
  const auto whole = run(env + kCli + " launch -n 2 " + kProgram + " trainer " + dir + "/a 2 '" +
                         settings + ",output_dir=" + dir + "/a/run'");
  ASSERT_EQ(whole.code, 0) << whole.output;
  const auto killed =
      run(env + "TRAINER_KILL_AT=137 " + kCli + " launch -n 2 " + kProgram + " trainer " + dir +
          "/b 2 '" + settings + ",output_dir=" + dir + "/b/run'");
  ASSERT_NE(killed.code, 0) << killed.output;
  const auto resumed =
      run(env + "TRAINER_BATCH=8 " + kCli + " launch -n 1 " + kProgram + " trainer " + dir +
          "/b 2 '" + settings + ",output_dir=" + dir + "/b/run,resume_from_checkpoint=latest'");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto want = numbers_after_name(dir + "/a/params_0.txt");
  const auto got = numbers_after_name(dir + "/b/params_0.txt");
  ASSERT_EQ(want.size(), got.size());
  double largest = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(want[i] - got[i]));
  }
  EXPECT_LE(worst, 1e-6 * largest) << "largest " << largest;
  EXPECT_GT(worst, 0.0) << "another process count should not be bitwise the same";
  std::vector<double> wl, gl;
  for (const auto& l : lines_of(dir + "/a/trace_0.txt"))
    if (l.rfind("log ", 0) == 0) wl.push_back(std::stod(l.substr(l.rfind(' ') + 1)));
  for (const auto& l : lines_of(dir + "/b/trace_0.txt"))
    if (l.rfind("log ", 0) == 0) gl.push_back(std::stod(l.substr(l.rfind(' ') + 1)));
  ASSERT_EQ(gl.size(), 18u) << "the resumed run logs steps 130 to 300";
  for (size_t k = 0; k < gl.size(); ++k) EXPECT_NEAR(gl[k], wl[wl.size() - gl.size() + k], 1e-4);
  run("rm -rf " + dir);
}

}  // namespace

namespace {

// auto_find_batch_size: batches of 8 run out of memory from step 13 on (after 13 optimizer
// steps, two logs and a save), so the first try fails and the training starts again at
// int(8 * 0.9) = 7. The run found is the run started at 7: parameters, trainer_state.json,
// tracker records and checkpoints bitwise, on 1 and 2 processes. With no size fitting, the
// search ends with Accelerate's message.
TEST(TrainerAutoBatchSize, ARetriedRunIsTheRunStartedAtTheSizeFound) {
  const std::string dir = ::testing::TempDir() + "trainer_auto_batch_" + std::to_string(getpid());
  const std::string settings =
      "max_steps=40,logging_steps=5,save_steps=10,save_total_limit=2,speed_metrics=false";
  for (int n : {1, 2}) {
    ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir + "/a " + dir + "/b").code, 0);
    const std::string launch = kCli + " launch -n " + std::to_string(n) + " " + kProgram;
    const std::string env = "TRAINER_LOG_WITH=jsonl ";
    const auto direct = run(env + "TRAINER_BATCH=7 " + launch + " trainer " + dir + "/a 2 '" +
                            settings + ",output_dir=" + dir + "/a/run'");
    ASSERT_EQ(direct.code, 0) << direct.output;
    const auto found = run(env + "TRAINER_BATCH=8 TRAINER_MEMORY_ROWS=7 TRAINER_OOM_FROM_STEP=13 " +
                           launch + " trainer " + dir + "/b 2 '" + settings +
                           ",auto_find_batch_size=true,output_dir=" + dir + "/b/run'");
    ASSERT_EQ(found.code, 0) << found.output;
    EXPECT_NE(found.output.find("batch size 8 ran out of memory"), std::string::npos)
        << found.output;
    EXPECT_NE(found.output.find("trained at batch size 7 (from 8)"), std::string::npos)
        << found.output;
    const auto begins = run("grep -c '^on_train_begin' " + dir + "/b/events_0.txt");
    EXPECT_EQ(begins.output, "2\n") << "each try begins a training, as in transformers";
    for (const std::string f :
         {"model/model.safetensors", "trainer_state.json", "run/checkpoint-40/model_0.safetensors",
          "run/checkpoint-40/optimizer_0.safetensors"})
      EXPECT_EQ(run("cmp " + dir + "/a/" + f + " " + dir + "/b/" + f).code, 0)
          << n << " processes: " << f;
    EXPECT_EQ(run("grep -q '\"train_batch_size\": 7' " + dir + "/b/trainer_state.json").code, 0);
    const auto listing = run("cd " + dir + "/a/run && ls -A > ../ls && cd " + dir +
                             "/b/run && ls -A > ../ls && cmp " + dir + "/a/ls " + dir + "/b/ls");
    EXPECT_EQ(listing.code, 0) << "the failed try's checkpoints and the start are removed";
    const std::string records_of =
        "find logs -type f | sort | xargs cat | sed 's/\"wall_time\": [0-9.]*//'";
    const auto records = run("cd " + dir + "/a && " + records_of + " > records && cd " + dir +
                             "/b && " + records_of + " > records && diff " + dir + "/a/records " +
                             dir + "/b/records && test -s " + dir + "/a/records");
    EXPECT_EQ(records.code, 0) << records.output;
  }
  const auto none = run("TRAINER_BATCH=8 TRAINER_MEMORY_ROWS=0 " + kCli + " launch -n 2 " +
                        kProgram + " trainer " + dir + "/b 2 '" + settings +
                        ",auto_find_batch_size=true,output_dir=" + dir + "/c'");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.output.find("No executable batch size found, reached zero."), std::string::npos)
      << none.output;
  EXPECT_EQ(run("test -e " + dir + "/c/.auto_find_batch_size_start").code, 1) << "removed";
  run("rm -rf " + dir);
}

// Resumed with auto_find_batch_size, the search starts from the checkpoint's train_batch_size
// (8, not the program's 16, as transformers does), and a retry resumes from the checkpoint again:
// the run equals the same resume made directly at 7.
TEST(TrainerAutoBatchSize, AResumedSearchStartsFromTheCheckpointsSize) {
  const std::string dir = ::testing::TempDir() + "trainer_auto_resume_" + std::to_string(getpid());
  const std::string settings = "max_steps=40,logging_steps=5,save_steps=10,speed_metrics=false";
  const std::string launch = kCli + " launch -n 1 " + kProgram;
  ASSERT_EQ(run("rm -rf " + dir + " && mkdir -p " + dir + "/a " + dir + "/b").code, 0);
  const auto killed = run("TRAINER_KILL_AT=17 TRAINER_BATCH=8 " + launch + " trainer " + dir +
                          "/a 2 '" + settings + ",output_dir=" + dir + "/a/run'");
  ASSERT_NE(killed.code, 0) << killed.output;
  ASSERT_EQ(run("cp -r " + dir + "/a/run " + dir + "/b/run").code, 0);
  const auto direct = run("TRAINER_BATCH=7 " + launch + " trainer " + dir + "/a 2 '" + settings +
                          ",output_dir=" + dir + "/a/run,resume_from_checkpoint=latest'");
  ASSERT_EQ(direct.code, 0) << direct.output;
  const auto found =
      run("TRAINER_BATCH=16 TRAINER_MEMORY_ROWS=7 TRAINER_OOM_FROM_STEP=13 " + launch +
          " trainer " + dir + "/b 2 '" + settings + ",auto_find_batch_size=true,output_dir=" + dir +
          "/b/run,resume_from_checkpoint=latest'");
  ASSERT_EQ(found.code, 0) << found.output;
  EXPECT_NE(found.output.find("trained at batch size 7 (from 8)"), std::string::npos)
      << found.output;
  EXPECT_EQ(found.output.find("batch size 16"), std::string::npos) << found.output;
  for (const std::string f :
       {"model/model.safetensors", "trainer_state.json", "run/checkpoint-10/trainer_state.json",
        "run/checkpoint-40/optimizer_0.safetensors"})
    EXPECT_EQ(run("cmp " + dir + "/a/" + f + " " + dir + "/b/" + f).code, 0) << f;
  run("rm -rf " + dir);
}

}  // namespace
