// torch.profiler's schedule as Accelerate's ProfileKwargs builds it, and the trace and table made
// from a window's events.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "common/error.hpp"
#include "profile/schedule.hpp"
#include "profile/trace.hpp"

namespace accel::profile {
namespace {

// Windows handed over by `with profile() as prof: for _ in range(steps): prof.step()`.
int64_t windows_over(const Schedule& s, int64_t steps) {
  int64_t windows = 0;
  Action action = s.at(0);
  windows += transition(Action::kNone, action).trace_ready;
  for (int64_t step = 1; step <= steps; ++step) {
    const Action next = s.at(step);
    windows += transition(action, next).trace_ready;
    action = next;
  }
  return windows + transition(action, std::nullopt).trace_ready;
}

TEST(ProfileSchedule, AccelerateTestSchedulesGiveItsTraceReadyCounts) {
  // accelerate/tests/test_kwargs_handlers.py test_profile_kwargs: five schedules over 100 steps,
  // min(cycles, repeat) windows (cycles when repeat is 0).
  struct Case {
    int64_t wait, warmup, active, repeat, skip_first;
  };
  for (const Case c : {Case{1, 1, 2, 1, 0}, Case{2, 2, 2, 2, 0}, Case{0, 1, 3, 3, 1},
                       Case{3, 2, 1, 1, 2}, Case{1, 0, 1, 5, 0}}) {
    Schedule s;
    s.given = true;
    s.wait = c.wait;
    s.warmup = c.warmup;
    s.active = c.active;
    s.repeat = c.repeat;
    s.skip_first = c.skip_first;
    const int64_t cycles = (100 - c.skip_first) / (c.wait + c.warmup + c.active);
    const int64_t expected = c.repeat > 0 ? std::min(cycles, c.repeat) : cycles;
    EXPECT_EQ(windows_over(s, 100), expected)
        << "wait " << c.wait << " warmup " << c.warmup << " active " << c.active;
  }
}

TEST(ProfileSchedule, StepsFollowTorchsSchedule) {
  Schedule s;
  s.given = true;
  s.skip_first = 1;
  s.wait = 1;
  s.warmup = 1;
  s.active = 2;
  s.repeat = 1;
  const Action expected[] = {Action::kNone,   Action::kNone,          Action::kWarmup,
                             Action::kRecord, Action::kRecordAndSave, Action::kNone};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(s.at(i), expected[i]) << "step " << i;
  Schedule none;
  EXPECT_EQ(none.at(0), Action::kRecord);
  EXPECT_EQ(windows_over(none, 100), 1);  // without a schedule the block is one window
}

TEST(ProfileSchedule, TransitionsAreTorchsActionMap) {
  const Transition saved = transition(Action::kRecordAndSave, Action::kRecord);
  EXPECT_TRUE(saved.stop && saved.trace_ready && saved.prepare && saved.start && saved.stop_first);
  const Transition warm_to_none = transition(Action::kWarmup, Action::kNone);
  EXPECT_TRUE(warm_to_none.start && warm_to_none.stop && warm_to_none.warn_incorrect);
  EXPECT_FALSE(warm_to_none.trace_ready);
  EXPECT_TRUE(transition(Action::kRecord, std::nullopt).trace_ready);
  EXPECT_FALSE(transition(Action::kWarmup, std::nullopt).trace_ready);
  const Transition nothing = transition(Action::kRecord, Action::kRecordAndSave);
  EXPECT_FALSE(nothing.start || nothing.stop || nothing.prepare || nothing.trace_ready);
}

TEST(ProfileSchedule, BadSchedulesAreRefused) {
  Schedule s;
  s.given = true;
  s.active = 0;
  EXPECT_THROW(s.validate(), accel::Error);
  s.active = 1;
  s.wait = -1;
  EXPECT_THROW(s.validate(), accel::Error);
}

std::vector<Event> nested_events() {
  Event outer{"aten::linear", 100, 50, 1};
  Event inner{"aten::mm", 110, 30, 1};
  inner.shapes = {{2, 3}, {3, 4}};
  inner.dtypes = {"float", "float"};
  inner.flops = 48;
  Event other_thread{"aten::mm", 105, 10, 2};
  Event memory{"[memory]", 120, 0, 1};
  memory.bytes = 4096;
  return {outer, inner, other_thread, memory};
}

TEST(ProfileTrace, ChromeTraceIsJsonWithCompleteAndMemoryEvents) {
  const auto j = nlohmann::json::parse(chrome_trace(nested_events(), 3));
  ASSERT_TRUE(j["traceEvents"].is_array());
  ASSERT_EQ(j["traceEvents"].size(), 4u);
  const auto& mm = j["traceEvents"][1];
  EXPECT_EQ(mm["name"], "aten::mm");
  EXPECT_EQ(mm["ph"], "X");
  EXPECT_EQ(mm["pid"], 3);
  EXPECT_EQ(mm["ts"], 110);
  EXPECT_EQ(mm["dur"], 30);
  EXPECT_EQ(mm["args"]["Input Dims"][1][1], 4);
  EXPECT_EQ(mm["args"]["flops"], 48);
  EXPECT_EQ(j["traceEvents"][3]["ph"], "i");
  EXPECT_EQ(j["traceEvents"][3]["args"]["Bytes"], 4096);
  EXPECT_EQ(j["distributedInfo"]["rank"], 3);
  EXPECT_TRUE(nlohmann::json::parse(chrome_trace({}, 0))["traceEvents"].empty());
}

TEST(ProfileTrace, TableHasSelfAndTotalTimesAndTorchsFooter) {
  const std::string table = summary_table(nested_events(), "cpu_time_total", -1);
  // aten::linear: 50 us in total, 20 us its own (the mm inside took 30).
  EXPECT_NE(table.find("aten::linear"), std::string::npos) << table;
  EXPECT_NE(table.find("20.000us"), std::string::npos) << table;
  EXPECT_NE(table.find("Self CPU time total: 60.000us"), std::string::npos) << table;
  EXPECT_EQ(table.find("[memory]"), std::string::npos);
  // Two mm calls (40 us) sort after linear's 50 us total; by count, mm comes first.
  EXPECT_LT(table.find("aten::linear"), table.find("aten::mm"));
  const std::string by_count = summary_table(nested_events(), "count", 1);
  EXPECT_NE(by_count.find("aten::mm"), std::string::npos);
  EXPECT_EQ(by_count.find("aten::linear"), std::string::npos);
  EXPECT_THROW(summary_table(nested_events(), "flops", -1), accel::Error);
}

}  // namespace
}  // namespace accel::profile
