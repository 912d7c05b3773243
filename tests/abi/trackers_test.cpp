// Trackers through the C interface: log_with and logging_dir, the files of a run, custom trackers
// and their failures, and every bad input of "What it must show".
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "accelerator_env.hpp"

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

accel_values* values_of(std::initializer_list<std::pair<const char*, double>> numbers) {
  accel_values* v = nullptr;
  EXPECT_EQ(accel_values_new(&v), ACCEL_OK);
  for (const auto& [k, x] : numbers) EXPECT_EQ(accel_values_set_number(v, k, x), ACCEL_OK);
  return v;
}

std::string error_of(accel_status st, accel_status want) {
  EXPECT_EQ(st, want) << accel_status_name(st) << ": " << accel_last_error_message();
  return accel_last_error_message();
}

}  // namespace

TEST(Values, KeepTheOrderFirstSetAndReplaceInPlace) {
  accel_values* v = values_of({{"loss", 1.5}, {"lr", 0.1}});
  OK(accel_values_set_text(v, "loss", "diverged"));
  OK(accel_values_set_number(v, "acc", 0.9));
  size_t n = 0;
  OK(accel_values_count(v, &n));
  ASSERT_EQ(n, 3u);
  const char *key = nullptr, *text = nullptr;
  int32_t is_text = -1;
  double number = -1;
  OK(accel_values_get(v, 0, &key, &is_text, &number, &text));
  EXPECT_STREQ(key, "loss");
  EXPECT_EQ(is_text, 1);
  EXPECT_STREQ(text, "diverged");
  EXPECT_EQ(number, 0);
  OK(accel_values_get(v, 2, &key, &is_text, &number, &text));
  EXPECT_STREQ(key, "acc");
  EXPECT_EQ(is_text, 0);
  EXPECT_EQ(number, 0.9);
  EXPECT_EQ(text, nullptr);
  OK(accel_values_get(v, 1, nullptr, nullptr, nullptr, nullptr));
  EXPECT_NE(
      error_of(accel_values_get(v, 3, &key, nullptr, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT)
          .find("index 3 of 3"),
      std::string::npos);
  error_of(accel_values_set_number(v, "", 1), ACCEL_ERR_INVALID_ARGUMENT);
  accel_values_free(v);
}

TEST(Trackers, AllThreeWriteUnderLoggingDirSlashProject) {
  const std::string dir = fresh_dir("trackers_capi");
  init_with({{"log_with", "all"}, {"logging_dir", dir.c_str()}});
  accel_values* config = values_of({{"lr", 0.001}, {"batch_size", 64}});
  OK(accel_values_set_text(config, "model", "cnn"));
  OK(accel_init_trackers(g_acc, "fashion", config));
  const double inf = std::numeric_limits<double>::infinity();
  for (int step = 0; step < 3; ++step) {
    accel_values* v = values_of({{"loss", 1.0 / (step + 1)}, {"lr", 0.001}});
    if (step == 2) {
      OK(accel_values_set_number(v, "loss", std::nan("")));
      OK(accel_values_set_number(v, "grad_norm", inf));
    }
    OK(accel_log(g_acc, v, step));
    accel_values_free(v);
  }
  accel_values* unstepped = values_of({{"accuracy", 0.875}});
  OK(accel_log(g_acc, unstepped, -1));
  OK(accel_end_training(g_acc));
  OK(accel_end_training(g_acc));  // nothing started: nothing done
  const auto names = files_in(dir + "/fashion");
  ASSERT_EQ(names.size(), 6u) << ::testing::PrintToString(names);
  EXPECT_EQ(names[0].rfind("events.out.tfevents.", 0), 0u);
  const auto jsonl = lines_of(dir + "/fashion/metrics.jsonl");
  ASSERT_EQ(jsonl.size(), 4u);
  EXPECT_NE(jsonl[2].find("\"values\": {\"loss\": NaN, \"lr\": 0.001, \"grad_norm\": Infinity}"),
            std::string::npos)
      << jsonl[2];
  EXPECT_EQ(jsonl[3].rfind("{\"step\": null,", 0), 0u) << jsonl[3];
  EXPECT_EQ(lines_of(dir + "/fashion/metrics.csv").size(), 1u + 2 + 2 + 3 + 1);
  EXPECT_EQ(lines_of(dir + "/fashion/hparams.yml"),
            (std::vector<std::string>{"lr: 0.001", "batch_size: 64", "model: \"cnn\""}));
  // After end_training the run is over: logging is an error, a new run may start.
  error_of(accel_log(g_acc, unstepped, 4), ACCEL_ERR_STATE);
  OK(accel_init_trackers(g_acc, "fashion", nullptr));
  OK(accel_end_training(g_acc));
  EXPECT_EQ(files_in(dir + "/fashion").size(), 7u);  // a second event file
  accel_values_free(unstepped);
  accel_values_free(config);
}

TEST(Trackers, LoggingDirDefaultsToProjectDir) {
  const std::string dir = fresh_dir("trackers_project");
  init_with({{"log_with", "jsonl"}, {"project_dir", dir.c_str()}});
  OK(accel_init_trackers(g_acc, "run", nullptr));
  accel_values* v = values_of({{"loss", 2}});
  OK(accel_log(g_acc, v, 7));
  accel_values_free(v);
  OK(accel_end_training(g_acc));
  const auto lines = lines_of(dir + "/run/metrics.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("{\"step\": 7,", 0), 0u) << lines[0];
}

struct Said {
  int32_t level = 0;
  std::string message;
};
int32_t remember_said(accel_log_level level, int32_t, accel_log_flags, const char* message,
                      void* user) {
  auto* said = static_cast<std::vector<Said>*>(user);
  said->push_back({level, message});
  return 0;
}

// A killed run's torn last line is moved aside before the resumed run appends, and the program's
// log sink hears of it as a warning.
TEST(Trackers, ATornLineLeftByAKilledRunIsMovedAsideAndSaidThroughTheLogger) {
  const std::string dir = fresh_dir("trackers_torn");
  init_with({{"log_with", "jsonl,csv"}, {"project_dir", dir.c_str()}});
  std::vector<Said> said;
  OK(accel_set_log_sink(g_acc, remember_said, &said, nullptr));
  // Off again however the test ends: the sink points at this frame's vector.
  struct SinkOff {
    ~SinkOff() { accel_set_log_sink(g_acc, nullptr, nullptr, nullptr); }
  } sink_off;
  mkdir(dir.c_str(), 0755);
  mkdir((dir + "/run").c_str(), 0755);
  std::ofstream(dir + "/run/metrics.jsonl")
      << "{\"step\": 1, \"wall_time\": 1, \"values\": {}}\n{\"st";
  OK(accel_init_trackers(g_acc, "run", nullptr));
  accel_values* v = values_of({{"loss", 2}});
  OK(accel_log(g_acc, v, 2));
  accel_values_free(v);
  OK(accel_end_training(g_acc));
  const auto lines = lines_of(dir + "/run/metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].rfind("{\"step\": 2,", 0), 0u) << lines[1];
  EXPECT_EQ(lines_of(dir + "/run/metrics.jsonl.torn-1"), std::vector<std::string>{"{\"st"});
  ASSERT_EQ(said.size(), 1u);  // the csv file was new: nothing to say of it
  EXPECT_EQ(said[0].level, ACCEL_LOG_WARNING);
  EXPECT_NE(said[0].message.find("moved to " + dir + "/run/metrics.jsonl.torn-1"),
            std::string::npos)
      << said[0].message;
  // The accelerator's level filters the library's own warnings as it does the program's.
  std::ofstream(dir + "/run/metrics.jsonl", std::ios::app) << "{\"st";
  OK(accel_set_log_level(g_acc, ACCEL_LOG_ERROR));
  OK(accel_init_trackers(g_acc, "run", nullptr));
  OK(accel_end_training(g_acc));
  EXPECT_EQ(said.size(), 1u) << "a warning below the level reached the sink";
  EXPECT_EQ(lines_of(dir + "/run/metrics.jsonl.torn-2"), std::vector<std::string>{"{\"st"});
  OK(accel_set_log_sink(g_acc, nullptr, nullptr, nullptr));
}

TEST(Trackers, BadInputIsAClearErrorAndLosesNothing) {
  // An unknown tracker name, wherever it is set.
  accel_config* c = nullptr;
  OK(accel_config_new(&c));
  EXPECT_NE(error_of(accel_config_set(c, "log_with", "tensorboard,wandb"), ACCEL_ERR_CONFIG)
                .find("unknown tracker 'wandb'"),
            std::string::npos);
  accel_config_free(c);
  // log_with without a directory.
  init_with({{"log_with", "csv"}});
  EXPECT_NE(error_of(accel_init_trackers(g_acc, "run", nullptr), ACCEL_ERR_CONFIG)
                .find("set logging_dir or project_dir"),
            std::string::npos);
  // An unwritable logging directory: at init_trackers, and nothing is left started.
  init_with({{"log_with", "all"}, {"logging_dir", "/dev/null/logs"}});
  EXPECT_NE(error_of(accel_init_trackers(g_acc, "run", nullptr), ACCEL_ERR_IO)
                .find("/dev/null is not a directory"),
            std::string::npos);
  accel_values* v = values_of({{"loss", 1}});
  EXPECT_NE(error_of(accel_log(g_acc, v, 0), ACCEL_ERR_STATE).find("accel_init_trackers"),
            std::string::npos);
  // Project names that are not one path component; steps below -1; a second start.
  const std::string dir = fresh_dir("trackers_bad");
  init_with({{"log_with", "jsonl"}, {"logging_dir", dir.c_str()}});
  for (const char* bad : {"", "a/b", "..", "."})
    error_of(accel_init_trackers(g_acc, bad, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  OK(accel_init_trackers(g_acc, "run", nullptr));
  error_of(accel_init_trackers(g_acc, "run", nullptr), ACCEL_ERR_STATE);
  error_of(accel_log(g_acc, v, -2), ACCEL_ERR_INVALID_ARGUMENT);
  OK(accel_log(g_acc, v, 0));
  OK(accel_end_training(g_acc));
  EXPECT_EQ(lines_of(dir + "/run/metrics.jsonl").size(), 1u);
  accel_values_free(v);
}

namespace {

struct Recorder {
  std::vector<std::string> calls;
  int32_t fail_log_at_step = -100;
  int released = 0;
};

int32_t record_start(const char* project, const accel_values* config, void* user) {
  size_t n = 0;
  accel_values_count(config, &n);
  static_cast<Recorder*>(user)->calls.push_back(std::string("start ") + project + " " +
                                                std::to_string(n));
  return 0;
}

int32_t record_log(const accel_values* values, int64_t step, void* user) {
  auto* r = static_cast<Recorder*>(user);
  const char* key = nullptr;
  double x = 0;
  accel_values_get(values, 0, &key, nullptr, &x, nullptr);
  r->calls.push_back("log " + std::to_string(step) + " " + key + "=" + std::to_string(x));
  return step == r->fail_log_at_step ? 7 : 0;
}

int32_t record_finish(void* user) {
  static_cast<Recorder*>(user)->calls.push_back("finish");
  return 0;
}

void count_release(void* user) {
  ++static_cast<Recorder*>(user)->released;
}

}  // namespace

TEST(Trackers, CustomTrackerGetsEveryCallAndItsFailureIsNamedWithoutLosingOthers) {
  const std::string dir = fresh_dir("trackers_custom");
  init_with({{"log_with", "jsonl"}, {"logging_dir", dir.c_str()}});
  Recorder rec;
  rec.fail_log_at_step = 1;
  OK(accel_add_tracker(g_acc, "mlflow", record_start, record_log, record_finish, &rec,
                       count_release));
  error_of(accel_add_tracker(g_acc, "mlflow", nullptr, record_log, nullptr, &rec, count_release),
           ACCEL_ERR_INVALID_ARGUMENT);
  error_of(accel_add_tracker(g_acc, "csv", nullptr, record_log, nullptr, &rec, count_release),
           ACCEL_ERR_INVALID_ARGUMENT);
  accel_values* config = values_of({{"lr", 0.5}});
  OK(accel_init_trackers(g_acc, "run", config));
  error_of(accel_add_tracker(g_acc, "late", nullptr, record_log, nullptr, &rec, count_release),
           ACCEL_ERR_STATE);
  accel_values* v = values_of({{"loss", 0.25}});
  OK(accel_log(g_acc, v, 0));
  EXPECT_NE(error_of(accel_log(g_acc, v, 1), ACCEL_ERR_CALLBACK)
                .find("tracker 'mlflow': its log callback returned 7"),
            std::string::npos);
  OK(accel_end_training(g_acc));
  EXPECT_EQ(rec.calls, (std::vector<std::string>{"start run 1", "log 0 loss=0.250000",
                                                 "log 1 loss=0.250000", "finish"}));
  EXPECT_EQ(lines_of(dir + "/run/metrics.jsonl").size(), 2u);  // the file got step 1 too
  EXPECT_EQ(rec.released, 0);
  init_with({});  // frees the accelerator: the one added tracker is released, the refused never
  EXPECT_EQ(rec.released, 1);
  accel_values_free(v);
  accel_values_free(config);
}

TEST(Trackers, AStartedRunEndsWhenTheAcceleratorIsFreed) {
  Recorder rec;
  init_with({});
  OK(accel_add_tracker(g_acc, "db", nullptr, record_log, record_finish, &rec, count_release));
  OK(accel_init_trackers(g_acc, "run", nullptr));
  init_with({});
  EXPECT_EQ(rec.calls, std::vector<std::string>{"finish"});
  EXPECT_EQ(rec.released, 1);
}

namespace {
accel_status g_reentry_status = ACCEL_OK;
int32_t reenter(const accel_values* values, int64_t, void*) {
  g_reentry_status = accel_log(g_acc, values, 1);
  return 0;
}
}  // namespace

TEST(Trackers, ACallbackCallingBackInIsAStateError) {
  init_with({});
  OK(accel_add_tracker(g_acc, "loop", nullptr, reenter, nullptr, nullptr, nullptr));
  OK(accel_init_trackers(g_acc, "run", nullptr));
  accel_values* v = values_of({{"loss", 1}});
  OK(accel_log(g_acc, v, 0));
  EXPECT_EQ(g_reentry_status, ACCEL_ERR_STATE);
  OK(accel_end_training(g_acc));
  accel_values_free(v);
}
