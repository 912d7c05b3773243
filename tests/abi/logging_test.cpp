// The rank-aware logger through the C interface on one process: the level from the configuration
// and the environment, the sink and its release, the default stderr line, and bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "accelerator_env.hpp"

namespace {

struct Seen {
  std::vector<std::string> lines;  // "level rank flags message"
  int released = 0;
  int32_t fail_with = 0;
  accel_status reentry = ACCEL_OK;
};

int32_t record(accel_log_level level, int32_t rank, accel_log_flags flags, const char* message,
               void* user_data) {
  auto* seen = static_cast<Seen*>(user_data);
  seen->lines.push_back(std::to_string(level) + " " + std::to_string(rank) + " " +
                        std::to_string(flags) + " " + message);
  return seen->fail_with;
}

int32_t reenter(accel_log_level, int32_t, accel_log_flags, const char*, void* user_data) {
  static_cast<Seen*>(user_data)->reentry = accel_log_message(g_acc, ACCEL_LOG_INFO, 0, "again");
  return 0;
}

void release(void* user_data) {
  ++static_cast<Seen*>(user_data)->released;
}

accel_log_level level_now() {
  accel_log_level level = -1;
  EXPECT_EQ(accel_get_log_level(g_acc, &level), ACCEL_OK) << accel_last_error_message();
  return level;
}

}  // namespace

TEST(Logging, TheLevelIsInfoUnlessTheConfigurationOrEnvironmentSaysOtherwise) {
  init_with({});
  EXPECT_EQ(level_now(), ACCEL_LOG_INFO);
  init_with({{"log_level", "DEBUG"}});
  EXPECT_EQ(level_now(), ACCEL_LOG_DEBUG);
  setenv("ACCELERATE_LOG_LEVEL", "error", 1);
  init_with({});
  unsetenv("ACCELERATE_LOG_LEVEL");
  EXPECT_EQ(level_now(), ACCEL_LOG_ERROR);
  OK(accel_set_log_level(g_acc, 25));
  EXPECT_EQ(level_now(), 25);
  init_with({});
}

TEST(Logging, TheSinkGetsWhatPassesTheLevelAndIsReleasedWhenReplaced) {
  Seen seen;
  init_with({});
  OK(accel_set_log_sink(g_acc, record, &seen, release));
  OK(accel_log_message(g_acc, ACCEL_LOG_INFO, 0, "main only"));
  OK(accel_log_message(g_acc, ACCEL_LOG_DEBUG, 0, "dropped"));
  OK(accel_log_message(g_acc, ACCEL_LOG_WARNING, ACCEL_LOG_ALL_PROCESSES, "every rank"));
  // One process: in order is a plain write, no barrier to wait in.
  OK(accel_log_message(g_acc, 35, ACCEL_LOG_ALL_PROCESSES | ACCEL_LOG_IN_ORDER, "in order"));
  OK(accel_set_log_level(g_acc, ACCEL_LOG_NOTSET));
  OK(accel_log_message(g_acc, 0, 0, "everything now"));
  EXPECT_EQ(seen.lines, (std::vector<std::string>{"20 0 0 main only", "30 0 1 every rank",
                                                  "35 0 3 in order", "0 0 0 everything now"}));
  EXPECT_EQ(seen.released, 0);
  OK(accel_set_log_sink(g_acc, nullptr, nullptr, nullptr));
  EXPECT_EQ(seen.released, 1);

  // Back on standard error, as one line.
  ::testing::internal::CaptureStderr();
  OK(accel_log_message(g_acc, ACCEL_LOG_ERROR, 0, "to stderr"));
  OK(accel_log_message(g_acc, 25, ACCEL_LOG_ALL_PROCESSES, "odd level"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "ERROR: to stderr\nLevel 25: odd level\n");

  Seen last;
  OK(accel_set_log_sink(g_acc, record, &last, release));
  init_with({});  // freeing the accelerator releases its sink
  EXPECT_EQ(last.released, 1);
}

TEST(Logging, BadInputIsAClearErrorAndLosesNothing) {
  Seen seen;
  init_with({});
  OK(accel_set_log_sink(g_acc, record, &seen, release));
  EXPECT_EQ(accel_log_message(g_acc, -1, 0, "m"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("log level -1 is outside 0..1000"),
            std::string::npos)
      << accel_last_error_message();
  EXPECT_EQ(accel_log_message(g_acc, 1001, 0, "m"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_set_log_level(g_acc, 5000), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_log_message(g_acc, ACCEL_LOG_INFO, 4, "m"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("unknown log flags 4"), std::string::npos);
  EXPECT_EQ(level_now(), ACCEL_LOG_INFO);
  EXPECT_TRUE(seen.lines.empty());

  // A sink that fails: the call says so; the next message still arrives.
  seen.fail_with = 7;
  EXPECT_EQ(accel_log_message(g_acc, ACCEL_LOG_INFO, 0, "refused"), ACCEL_ERR_CALLBACK);
  EXPECT_NE(std::string(accel_last_error_message()).find("the log sink returned 7"),
            std::string::npos)
      << accel_last_error_message();
  seen.fail_with = 0;
  OK(accel_log_message(g_acc, ACCEL_LOG_INFO, 0, "accepted"));
  EXPECT_EQ(seen.lines, (std::vector<std::string>{"20 0 0 refused", "20 0 0 accepted"}));

  // A sink that logs from inside gets a state error instead of a deadlock.
  Seen inner;
  OK(accel_set_log_sink(g_acc, reenter, &inner, release));
  OK(accel_log_message(g_acc, ACCEL_LOG_INFO, 0, "outer"));
  EXPECT_EQ(inner.reentry, ACCEL_ERR_STATE);

  accel_config* c = nullptr;
  OK(accel_config_new(&c));
  EXPECT_EQ(accel_config_set(c, "log_level", "verbose"), ACCEL_ERR_CONFIG);
  EXPECT_NE(std::string(accel_last_error_message()).find("notset, debug, info, warning"),
            std::string::npos)
      << accel_last_error_message();
  accel_config_free(c);
  init_with({});
  EXPECT_EQ(inner.released, 1);
}
