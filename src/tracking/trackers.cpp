#include <chrono>
#include <iterator>
#include <sstream>

#include "common/error.hpp"
#include "tracking/file_trackers.hpp"
#include "tracking/tracker.hpp"

namespace accel::tracking {
namespace {

// One built-in tracker: its log_with name and the function that makes its writer.
struct TrackerRow {
  const char* name;
  std::unique_ptr<Tracker> (*make)(const std::string& dir, Warn warn);
};

// The built-in trackers, in the order log_with's "all" starts them; every list of their names
// (the "all" expansion, the check of log_with, its error message, the names a custom tracker may
// not take) derives from this table. A new tracker: its writer (one file, make_<name>_tracker
// declared in file_trackers.hpp) and one row here.
const TrackerRow kTrackers[] = {
    {"tensorboard", make_tensorboard_tracker},
    {"jsonl", make_jsonl_tracker},
    {"csv", make_csv_tracker},
};

const TrackerRow* find_tracker(const std::string& name) {
  for (const TrackerRow& row : kTrackers)
    if (name == row.name) return &row;
  return nullptr;
}

// "tensorboard, jsonl and csv; 'all' is the three": the table's names as the error message says
// them.
std::string known_trackers() {
  static const char* const kCount[] = {"none", "one", "two",   "three", "four",
                                       "five", "six", "seven", "eight", "nine"};
  const size_t n = std::size(kTrackers);
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += std::string(i == 0 ? "" : i + 1 == n ? " and " : ", ") + kTrackers[i].name;
  return out + "; 'all' is the " + (n < std::size(kCount) ? kCount[n] : std::to_string(n));
}

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

bool is_log_with_name(const std::string& name) {
  return name == "all" || find_tracker(name) != nullptr;
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
      for (const TrackerRow& row : kTrackers) add(row.name);
      continue;
    }
    if (!find_tracker(item))
      fail(Errc::config, "log_with: unknown tracker '" + item + "' (libaccel writes " +
                             known_trackers() +
                             "; any other tracker is a custom one, added with accel_add_tracker)");
    add(item);
  }
  return names;
}

std::vector<std::unique_ptr<Tracker>> make_file_trackers(const std::string& log_with,
                                                         const std::string& dir, Warn warn) {
  std::vector<std::unique_ptr<Tracker>> trackers;
  for (const std::string& name : parse_log_with(log_with))
    trackers.push_back(find_tracker(name)->make(dir, warn));
  return trackers;
}

}  // namespace accel::tracking
