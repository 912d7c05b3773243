// The csv tracker (file_trackers.hpp): one row per value in metrics.csv, long format, so that a
// value first logged mid-run needs no new column.
#include "tracking/file_trackers.hpp"
#include "tracking/formats.hpp"
#include "tracking/output_file.hpp"

#include <cstdlib>

namespace accel::tracking {
namespace {

std::string value_field(const Value& v) {
  return v.is_text ? csv_field(v.text) : number_text(v.number);
}

class CsvTracker : public Tracker {
 public:
  CsvTracker(std::string dir, Warn warn) : dir_(std::move(dir)), warn_(std::move(warn)) {}
  const std::string& name() const override { return name_; }

  void start(const std::string&, const Values& config) override {
    make_directories(dir_);
    metrics_.open(dir_ + "/metrics.csv", OutputFile::Mode::kAppend);
    if (warn_ && !metrics_.torn_kept_in().empty()) warn_(metrics_.torn_notice());
    if (metrics_.size_at_open() == 0) metrics_.append("wall_time,step,tag,value\n");
    std::string rows = "key,value\n";
    for (const Value& v : config) rows += csv_field(v.key) + "," + value_field(v) + "\n";
    OutputFile file;
    file.open(dir_ + "/hparams.csv", OutputFile::Mode::kReplace);
    file.append(rows);
  }

  void log(const Values& values, int64_t step, double wall_time) override {
    const std::string head =
        number_text(wall_time) + "," + (step == kNoStep ? "" : std::to_string(step)) + ",";
    std::string rows;
    for (const Value& v : values) rows += head + csv_field(v.key) + "," + value_field(v) + "\n";
    metrics_.append(rows);
  }

  void finish() override { metrics_.close(); }

  // Rows are wall_time,step,tag,value (the header and rows without a step stay).
  void resume_at(int64_t step) override {
    metrics_.keep_lines([step](const std::string& line) {
      const size_t a = line.find(',');
      if (a == std::string::npos) return true;
      const size_t b = line.find(',', a + 1);
      const std::string field = line.substr(a + 1, b == std::string::npos ? b : b - a - 1);
      if (field.empty() || field.find_first_not_of("0123456789") != std::string::npos) return true;
      return std::strtoll(field.c_str(), nullptr, 10) <= step;
    });
  }

 private:
  std::string name_ = "csv";
  std::string dir_;
  Warn warn_;
  OutputFile metrics_;
};

}  // namespace

std::unique_ptr<Tracker> make_csv_tracker(const std::string& dir, Warn warn) {
  return std::make_unique<CsvTracker>(dir, std::move(warn));
}

}  // namespace accel::tracking
