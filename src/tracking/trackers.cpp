#include <chrono>
#include <sstream>

#include "common/error.hpp"
#include "tracking/file_trackers.hpp"
#include "tracking/tracker.hpp"

namespace accel::tracking {
namespace {

const char* const kKnown[] = {"tensorboard", "jsonl", "csv"};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

double wall_clock_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> parse_log_with(const std::string& log_with) {
  std::vector<std::string> names;
  auto add = [&](const std::string& n) {
    for (const auto& have : names)
      if (have == n) return;
    names.push_back(n);
  };
  std::stringstream in(log_with);
  for (std::string item; std::getline(in, item, ',');) {
    item = trim(item);
    if (item.empty()) continue;
    if (item == "all") {
      for (const char* k : kKnown) add(k);
      continue;
    }
    bool known = false;
    for (const char* k : kKnown) known = known || item == k;
    if (!known)
      fail(Errc::config, "log_with: unknown tracker '" + item +
                             "' (libaccel writes tensorboard, jsonl and csv; 'all' is the three; "
                             "any other tracker is a custom one, added with accel_add_tracker)");
    add(item);
  }
  return names;
}

std::vector<std::unique_ptr<Tracker>> make_file_trackers(const std::string& log_with,
                                                         const std::string& dir, Warn warn) {
  std::vector<std::unique_ptr<Tracker>> trackers;
  for (const std::string& name : parse_log_with(log_with)) {
    if (name == "tensorboard") trackers.push_back(make_tensorboard_tracker(dir));
    if (name == "jsonl") trackers.push_back(make_jsonl_tracker(dir, warn));
    if (name == "csv") trackers.push_back(make_csv_tracker(dir, warn));
  }
  return trackers;
}

}  // namespace accel::tracking
