// The tensorboard tracker (file_trackers.hpp): TensorBoard's event files written natively.
#include <cmath>
#include <regex>

#include "tracking/event_file.hpp"
#include "tracking/file_trackers.hpp"
#include "tracking/formats.hpp"

namespace accel::tracking {
namespace {

// A YAML key as it is when plain, double-quoted otherwise.
std::string yaml_key(const std::string& key) {
  static const std::regex plain("[A-Za-z_][A-Za-z0-9_.-]*");
  static const std::regex reserved("(true|false|yes|no|on|off|null|y|n)", std::regex::icase);
  if (std::regex_match(key, plain) && !std::regex_match(key, reserved)) return key;
  return json_string(key);
}

std::string yaml_value(const Value& v) {
  if (v.is_text) return json_string(v.text);
  if (std::isnan(v.number)) return ".nan";
  if (std::isinf(v.number)) return v.number > 0 ? ".inf" : "-.inf";
  // YAML 1.1 (PyYAML) reads "1e-05" as a string: an exponent needs a point, "1.0e-05", as
  // PyYAML itself writes floats.
  std::string text = number_text(v.number);
  const size_t e = text.find('e');
  if (e != std::string::npos && text.find('.') == std::string::npos) text.insert(e, ".0");
  return text;
}

std::string markdown_cell(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// Markdown, as TensorBoard's text plugin renders it.
std::string markdown_table(const Values& config) {
  std::string out = "| hyperparameter | value |\n|---|---|\n";
  for (const Value& v : config)
    out += "| " + markdown_cell(v.key) + " | " +
           markdown_cell(v.is_text ? v.text : number_text(v.number)) + " |\n";
  return out;
}

class TensorBoardTracker : public Tracker {
 public:
  explicit TensorBoardTracker(std::string dir) : dir_(std::move(dir)) {}
  const std::string& name() const override { return name_; }

  void start(const std::string&, const Values& config) override {
    make_directories(dir_);
    const double t = wall_clock_now();
    events_.open(dir_, t);
    if (config.empty()) return;
    events_.write_event(text_event("hparams", markdown_table(config), 0, t));
    std::string yaml;
    for (const Value& v : config) yaml += yaml_key(v.key) + ": " + yaml_value(v) + "\n";
    OutputFile file;
    file.open(dir_ + "/hparams.yml", OutputFile::Mode::kReplace);
    file.append(yaml);
  }

  void log(const Values& values, int64_t step, double wall_time) override {
    std::string records;  // one write(2) for the whole call
    for (const Value& v : values) {
      records += frame_record(
          v.is_text ? text_event(v.key, v.text, step, wall_time)
                    : scalar_event(v.key, static_cast<float>(v.number), step, wall_time));
    }
    events_.append_records(records);
  }

  void finish() override { events_.close(); }

  void resume_at(int64_t step) override {
    events_.write_event(session_start_event(step + 1, wall_clock_now()));
  }

 private:
  std::string name_ = "tensorboard";
  std::string dir_;
  EventFileWriter events_;
};

}  // namespace

std::unique_ptr<Tracker> make_tensorboard_tracker(const std::string& dir,
                                                  Warn /*warn: it repairs nothing*/) {
  return std::make_unique<TensorBoardTracker>(dir);
}

}  // namespace accel::tracking
