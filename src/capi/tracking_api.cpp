// accel_values, the trackers (accel_init_trackers, accel_log, accel_end_training) and trackers
// made of the program's callbacks (accel_add_tracker).
#include "capi/handles.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;
using accel::tracking::Value;
using accel::tracking::Values;

namespace {

void check_key(const char* key) {
  require(key, "key");
  if (!*key) fail(Errc::invalid_argument, "key is empty");
}

Value& slot(accel_values* values, const char* key) {
  for (Value& v : values->values)
    if (v.key == key) return v;
  values->values.push_back(Value{key, false, 0, ""});
  return values->values.back();
}

// A tracker of the program's own: its callbacks, called with the values as an accel_values.
class CallbackTracker : public accel::tracking::Tracker {
 public:
  CallbackTracker(std::string name, accel_tracker_start_fn start, accel_tracker_log_fn log,
                  accel_tracker_finish_fn finish, void* user_data, accel_release_fn release)
      : name_(std::move(name)),
        start_(start),
        log_(log),
        finish_(finish),
        user_data_(user_data),
        release_(release) {}
  ~CallbackTracker() override {
    if (release_) release_(user_data_);
  }
  const std::string& name() const override { return name_; }
  void arm_release(accel_release_fn release) { release_ = release; }

  void start(const std::string& project, const Values& config) override {
    if (!start_) return;
    accel_values v;
    v.values = config;
    check(start_(project.c_str(), &v, user_data_), "start");
  }
  void log(const Values& values, int64_t step, double) override {
    accel_values v;
    v.values = values;
    check(log_(&v, step, user_data_), "log");
  }
  void finish() override {
    if (finish_) check(finish_(user_data_), "finish");
  }

 private:
  void check(int32_t rc, const char* what) const {
    if (rc != 0)
      fail(Errc::callback,
           "tracker '" + name_ + "': its " + what + " callback returned " + std::to_string(rc));
  }
  std::string name_;
  accel_tracker_start_fn start_;
  accel_tracker_log_fn log_;
  accel_tracker_finish_fn finish_;
  void* user_data_;
  accel_release_fn release_;
};

}  // namespace

extern "C" {

ACCEL_API accel_status accel_values_new(accel_values** out) {
  return guarded([&] {
    require(out, "out");
    *out = new accel_values();
  });
}

ACCEL_API void accel_values_free(accel_values* values) {
  accel::capi::free_handle(values, "values");
}

ACCEL_API accel_status accel_values_set_number(accel_values* values, const char* key,
                                               double number) {
  return guarded([&] {
    checked(values, "values");
    check_key(key);
    Value& v = slot(values, key);
    v.is_text = false;
    v.number = number;
    v.text.clear();
  });
}

ACCEL_API accel_status accel_values_set_text(accel_values* values, const char* key,
                                             const char* text) {
  return guarded([&] {
    checked(values, "values");
    check_key(key);
    require(text, "text");
    Value& v = slot(values, key);
    v.is_text = true;
    v.number = 0;
    v.text = text;
  });
}

ACCEL_API accel_status accel_values_count(const accel_values* values, size_t* out) {
  return accel::capi::query(values, "values", out, [](const auto& h) { return h.values.size(); });
}

ACCEL_API accel_status accel_values_get(const accel_values* values, size_t index, const char** key,
                                        int32_t* is_text, double* number, const char** text) {
  return guarded([&] {
    checked(values, "values");
    if (index >= values->values.size())
      fail(Errc::invalid_argument, "index " + std::to_string(index) + " of " +
                                       std::to_string(values->values.size()) + " values");
    const Value& v = values->values[index];
    if (key) *key = v.key.c_str();
    if (is_text) *is_text = v.is_text ? 1 : 0;
    if (number) *number = v.is_text ? 0 : v.number;
    if (text) *text = v.is_text ? v.text.c_str() : nullptr;
  });
}

ACCEL_API accel_status accel_init_trackers(accel_accelerator* accelerator, const char* project_name,
                                           const accel_values* config) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    require(project_name, "project_name");
    if (config) checked(config, "config");
    FamilyLock lock(accelerator->family);
    core.init_trackers(project_name, config ? config->values : Values{});
  });
}

ACCEL_API accel_status accel_log(accel_accelerator* accelerator, const accel_values* values,
                                 int64_t step) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    checked(values, "values");
    FamilyLock lock(accelerator->family);
    core.log(values->values, step);
  });
}

ACCEL_API accel_status accel_end_training(accel_accelerator* accelerator) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    FamilyLock lock(accelerator->family);
    core.end_training();
  });
}

ACCEL_API accel_status accel_add_tracker(accel_accelerator* accelerator, const char* name,
                                         accel_tracker_start_fn start, accel_tracker_log_fn log,
                                         accel_tracker_finish_fn finish, void* user_data,
                                         accel_release_fn release) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    require(name, "name");
    if (!log) fail(Errc::invalid_argument, "log is NULL (a tracker needs its log callback)");
    FamilyLock lock(accelerator->family);
    // Made without `release`, armed once added: a refused registration never calls it (accel.h,
    // Callbacks).
    auto tracker = std::make_unique<CallbackTracker>(name, start, log, finish, user_data, nullptr);
    CallbackTracker* added = tracker.get();
    core.add_tracker(std::move(tracker));
    added->arm_release(release);
  });
}

}  // extern "C"
