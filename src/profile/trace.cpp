#include "profile/trace.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "common/error.hpp"

namespace accel::profile {
namespace {

nlohmann::json args_of(const Event& e) {
  nlohmann::json args = nlohmann::json::object();
  if (!e.shapes.empty()) args["Input Dims"] = e.shapes;
  if (!e.dtypes.empty()) args["Input type"] = e.dtypes;
  if (!e.stack.empty()) args["Call stack"] = e.stack;
  if (e.flops > 0) args["flops"] = e.flops;
  return args;
}

struct Row {
  std::string name;
  uint64_t self_us = 0, total_us = 0;
  int64_t calls = 0;
};

// Self time: an event's duration less its direct children's on the same thread (nesting by time).
std::vector<uint64_t> self_times(const std::vector<Event>& events) {
  std::vector<size_t> order(events.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events[a], &y = events[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.start_us != y.start_us) return x.start_us < y.start_us;
    return x.duration_us > y.duration_us;  // a parent before the children it starts with
  });
  std::vector<uint64_t> self(events.size());
  std::vector<size_t> open;
  for (size_t i : order) {
    const Event& e = events[i];
    self[i] = e.duration_us;
    if (e.memory()) continue;
    while (!open.empty() &&
           (events[open.back()].thread != e.thread ||
            events[open.back()].start_us + events[open.back()].duration_us <= e.start_us))
      open.pop_back();
    if (!open.empty()) self[open.back()] -= std::min(self[open.back()], e.duration_us);
    open.push_back(i);
  }
  return self;
}

// torch's _format_time.
std::string format_time(double us) {
  char buf[32];
  if (us >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  else if (us >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3fus", us);
  return buf;
}

std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

std::vector<Row> rows_of(const std::vector<Event>& events) {
  const std::vector<uint64_t> self = self_times(events);
  std::map<std::string, Row> by_name;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].memory()) continue;
    Row& r = by_name[events[i].name];
    r.name = events[i].name;
    r.self_us += self[i];
    r.total_us += events[i].duration_us;
    ++r.calls;
  }
  std::vector<Row> rows;
  for (auto& [name, row] : by_name) rows.push_back(row);
  return rows;
}

void sort_rows(std::vector<Row>& rows, const std::string& sort_by) {
  auto by = [&](auto key) {
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const Row& a, const Row& b) { return key(a) > key(b); });
  };
  if (sort_by == "cpu_time_total")
    by([](const Row& r) { return r.total_us; });
  else if (sort_by == "self_cpu_time_total")
    by([](const Row& r) { return r.self_us; });
  else if (sort_by == "count")
    by([](const Row& r) { return r.calls; });
  else if (sort_by != "name")
    fail(Errc::invalid_argument, "profiler table: unknown sort_by '" + sort_by +
                                     "'; known: cpu_time_total, self_cpu_time_total, count, name");
}

}  // namespace

std::string chrome_trace(const std::vector<Event>& events, int rank) {
  nlohmann::json list = nlohmann::json::array();
  for (const Event& e : events) {
    nlohmann::json j = {{"name", e.name}, {"pid", rank}, {"tid", e.thread}, {"ts", e.start_us}};
    if (e.memory()) {
      j["ph"] = "i";
      j["s"] = "t";
      j["cat"] = "cpu_instant_event";
      j["args"] = {{"Bytes", e.bytes}, {"Device Type", e.device}};
    } else {
      j["ph"] = "X";
      j["cat"] = e.device == "cuda" ? "kernel" : "cpu_op";
      j["dur"] = e.duration_us;
      j["args"] = args_of(e);
    }
    list.push_back(std::move(j));
  }
  nlohmann::json trace = {{"schemaVersion", 1},
                          {"traceEvents", std::move(list)},
                          {"displayTimeUnit", "ms"},
                          {"distributedInfo", {{"rank", rank}}}};
  return trace.dump();
}

std::string summary_table(const std::vector<Event>& events, const std::string& sort_by,
                          int64_t row_limit) {
  std::vector<Row> rows = rows_of(events);
  sort_rows(rows, sort_by);
  if (row_limit >= 0 && static_cast<size_t>(row_limit) < rows.size())
    rows.resize(static_cast<size_t>(row_limit));
  double self_total = 0, all_total = 0;
  for (const Row& r : rows_of(events)) self_total += static_cast<double>(r.self_us);
  all_total = self_total;
  size_t name_width = 4;
  for (const Row& r : rows) name_width = std::max(name_width, r.name.size());
  const std::string rule = std::string(name_width, '-') + "  " + [] {
    std::string s;
    for (int i = 0; i < 6; ++i) s += "------------  ";
    return s;
  }();
  std::string out = rule + "\n";
  char line[512];
  auto cell = [&](const std::string& name, const std::string* cols) {
    std::snprintf(line, sizeof line, "%*s  %12s  %12s  %12s  %12s  %12s  %12s  \n",
                  static_cast<int>(name_width), name.c_str(), cols[0].c_str(), cols[1].c_str(),
                  cols[2].c_str(), cols[3].c_str(), cols[4].c_str(), cols[5].c_str());
    out += line;
  };
  const std::string head[6] = {"Self CPU %", "Self CPU",     "CPU total %",
                               "CPU total",  "CPU time avg", "# of Calls"};
  cell("Name", head);
  out += rule + "\n";
  for (const Row& r : rows) {
    const std::string cols[6] = {
        percent(static_cast<double>(r.self_us), self_total),
        format_time(static_cast<double>(r.self_us)),
        percent(static_cast<double>(r.total_us), all_total),
        format_time(static_cast<double>(r.total_us)),
        format_time(static_cast<double>(r.total_us) / static_cast<double>(r.calls)),
        std::to_string(r.calls)};
    cell(r.name, cols);
  }
  out += rule + "\nSelf CPU time total: " + format_time(self_total) + "\n";
  return out;
}

}  // namespace accel::profile
