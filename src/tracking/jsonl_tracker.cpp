// The jsonl tracker (file_trackers.hpp): one JSON object per log call in metrics.jsonl.
#include "tracking/file_trackers.hpp"
#include "tracking/formats.hpp"
#include "tracking/output_file.hpp"

#include <cstdlib>

namespace accel::tracking {
namespace {

std::string json_object(const Values& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    out += (i ? ", " : "") + json_string(v.key) + ": " +
           (v.is_text ? json_string(v.text) : json_number(v.number));
  }
  return out + "}";
}

class JsonlTracker : public Tracker {
 public:
  JsonlTracker(std::string dir, Warn warn) : dir_(std::move(dir)), warn_(std::move(warn)) {}
  const std::string& name() const override { return name_; }

  void start(const std::string&, const Values& config) override {
    make_directories(dir_);
    metrics_.open(dir_ + "/metrics.jsonl", OutputFile::Mode::kAppend);
    if (warn_ && !metrics_.torn_kept_in().empty()) warn_(metrics_.torn_notice());
    OutputFile file;
    file.open(dir_ + "/hparams.json", OutputFile::Mode::kReplace);
    file.append(json_object(config) + "\n");
  }

  void log(const Values& values, int64_t step, double wall_time) override {
    metrics_.append("{\"step\": " + (step == kNoStep ? std::string("null") : std::to_string(step)) +
                    ", \"wall_time\": " + number_text(wall_time) +
                    ", \"values\": " + json_object(values) + "}\n");
  }

  void finish() override { metrics_.close(); }

  void resume_at(int64_t step) override {
    metrics_.keep_lines([step](const std::string& line) {
      const std::string head = "{\"step\": ";
      if (line.rfind(head, 0) != 0) return true;
      const std::string rest = line.substr(head.size());
      if (rest.rfind("null", 0) == 0) return true;
      char* end = nullptr;
      const long long at = std::strtoll(rest.c_str(), &end, 10);
      return end == rest.c_str() || at <= step;  // a line of another writer stays
    });
  }

 private:
  std::string name_ = "jsonl";
  std::string dir_;
  Warn warn_;
  OutputFile metrics_;
};

}  // namespace

std::unique_ptr<Tracker> make_jsonl_tracker(const std::string& dir, Warn warn) {
  return std::make_unique<JsonlTracker>(dir, std::move(warn));
}

}  // namespace accel::tracking
