// What a recorded profiler window holds, as Chrome-trace JSON (what torch.profiler's
// export_chrome_trace writes and chrome://tracing or Perfetto read) and as the summary table of
// torch's key_averages().table(). Pure logic: the LibTorch profiler fills the events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::profile {

struct Event {
  std::string name;  // "aten::mm", a user range, or "[memory]"
  uint64_t start_us = 0, duration_us = 0;
  uint64_t thread = 0;
  std::string device = "cpu";                // "cpu" or "cuda"
  std::vector<std::vector<int64_t>> shapes;  // record_shapes
  std::vector<std::string> dtypes;
  std::vector<std::string> stack;  // with_stack
  uint64_t flops = 0;              // with_flops
  int64_t bytes = 0;               // "[memory]" events (profile_memory): + allocated, - freed
  bool memory() const { return name == "[memory]"; }
};

// The Chrome trace of `events` for process `rank` (pid): complete ("X") events for operators,
// instant ("i") events for memory, the rank in the metadata.
std::string chrome_trace(const std::vector<Event>& events, int rank);

// torch's key_averages().table(): one row per name (self and total CPU time, calls), sorted by
// `sort_by` (cpu_time_total, self_cpu_time_total, count or name), at most `row_limit` rows (-1:
// all), ending with "Self CPU time total: ...". Memory events are not rows.
std::string summary_table(const std::vector<Event>& events, const std::string& sort_by,
                          int64_t row_limit);

}  // namespace accel::profile
