// accel_save_model, accel_load_checkpoint_in_model, save_state/load_state and the program's own
// checkpointed objects.
#include <cstring>
#include <optional>
#include <vector>

#include "bigmodel/disk_offload.hpp"
#include "capi/handles.hpp"
#include "checkpoint/model_io.hpp"
#include "checkpoint/sharded_load.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

namespace {

// Calls the program's release callback once, when the last copy of the registration is gone,
// and only if the registration succeeded.
struct Release {
  accel_release_fn fn;
  void* user_data;
  bool armed = false;
  ~Release() {
    if (armed && fn) fn(user_data);
  }
};

// The session a model was prepared with, or null: not prepared, or its accelerator freed (then
// the load is the plain one, which refuses parameters ZeRO stage 3 released).
std::shared_ptr<accel::prepare::Session> prepared_session(const accel_model* model) {
  return model->prepared ? model->session.lock() : nullptr;
}

constexpr size_t kNameCapacity = 4096;  // accel.h: accel_name_map_fn's capacity

// The program's name map as the loader calls it: a fixed buffer for the name, an empty name for
// "leave it unused", a nonzero return or a name without its NUL in the buffer an error.
accel::checkpoint::NameMap name_map(accel_name_map_fn map, void* user_data) {
  return [map, user_data](const std::string& name) -> std::optional<std::string> {
    std::vector<char> out(kNameCapacity, '\0');
    int32_t rc;
    {
      accel::capi::LockedCallbackScope inside;
      rc = map(name.c_str(), out.data(), out.size(), user_data);
    }
    if (rc != 0)
      fail(Errc::callback, "the name map returned " + std::to_string(rc) + " for '" + name + "'");
    const void* end = std::memchr(out.data(), '\0', out.size());
    if (!end)
      fail(Errc::callback, "the name map's name for '" + name + "' is longer than " +
                               std::to_string(out.size() - 1) + " bytes");
    if (out[0] == '\0') return std::nullopt;
    return std::string(out.data());
  };
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_save_model(accel_accelerator* accelerator, const accel_model* model,
                                        const char* dir, const char* max_shard_size) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    checked(model, "model");
    require(dir, "dir");
    FamilyLock lock(accelerator->family);  // the accelerator's family first, always
    FamilyLock model_lock(model->family);
    if (model->dispatch) model->dispatch->refuse_offloaded("accel_save_model", "");
    core.save_model(*model->model, dir, max_shard_size ? max_shard_size : "10GB");
  });
}

ACCEL_API accel_status accel_load_checkpoint_in_model(accel_model* model, const char* path) {
  return guarded([&] {
    checked(model, "model");
    require(path, "path");
    FamilyLock lock(model->family);
    if (model->dispatch) model->dispatch->refuse_offloaded("accel_load_checkpoint_in_model", "");
    const auto session = prepared_session(model);
    accel::checkpoint::load_planned(
        session.get(), *model->model, "accel_load_checkpoint_in_model",
        [&] { return accel::checkpoint::plan_strict_load(*model->model, path); });
  });
}

ACCEL_API accel_status accel_load_pretrained_mapped(accel_model* model, const char* path,
                                                    const char* options, accel_name_map_fn map,
                                                    void* user_data,
                                                    accel_load_report** out_report) {
  return guarded([&] {
    checked(model, "model");
    require(path, "path");
    auto parsed = accel::checkpoint::parse_pretrained_options(options ? options : "");
    if (map) parsed.map = name_map(map, user_data);
    auto report = std::make_unique<accel_load_report>();
    {
      FamilyLock lock(model->family);
      if (model->dispatch) model->dispatch->refuse_offloaded("accel_load_pretrained", "");
      const auto session = prepared_session(model);
      accel::checkpoint::load_planned(session.get(), *model->model, "accel_load_pretrained", [&] {
        return accel::checkpoint::plan_pretrained(*model->model, path, parsed, &report->load);
      });
    }
    if (out_report) *out_report = report.release();
  });
}

ACCEL_API accel_status accel_load_pretrained(accel_model* model, const char* path,
                                             const char* options, accel_load_report** out_report) {
  return accel_load_pretrained_mapped(model, path, options, nullptr, nullptr, out_report);
}

ACCEL_API accel_status accel_load_report_keys(const accel_load_report* report, const char* kind,
                                              accel_bytes_list** out) {
  return guarded([&] {
    checked(report, "report");
    require(kind, "kind");
    require(out, "out");
    const auto& plan = report->load.plan;
    auto list = std::make_unique<accel_bytes_list>();
    const std::string k = kind;
    if (k == "missing")
      list->items = plan.missing;
    else if (k == "unexpected")
      list->items = plan.unexpected;
    else if (k == "mismatched")
      for (const auto& m : plan.mismatched) list->items.push_back(m.key);
    else
      fail(Errc::invalid_argument, "kind '" + k + "' is none of missing, unexpected, mismatched");
    *out = list.release();
  });
}

ACCEL_API accel_status accel_load_report_text(const accel_load_report* report, bool warnings_only,
                                              char* buf, size_t capacity, size_t* out_size) {
  return guarded([&] {
    checked(report, "report");
    std::string text;
    for (const auto& line : report->load.report)
      if (line.warning || !warnings_only)
        text += (line.warning ? "WARNING: " : "INFO: ") + line.text + "\n";
    accel::capi::write_text(text, buf, capacity, out_size);
  });
}

ACCEL_API void accel_load_report_free(accel_load_report* report) {
  accel::capi::free_handle(report, "report");
}

ACCEL_API accel_status accel_save_state(accel_accelerator* accelerator, const char* dir) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    const std::string path = dir ? dir : "";
    FamilyLock lock(accelerator->family);
    core.save_state(dir ? &path : nullptr);
  });
}

ACCEL_API accel_status accel_load_state(accel_accelerator* accelerator, const char* dir) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    const std::string path = dir ? dir : "";
    FamilyLock lock(accelerator->family);
    core.load_state(dir ? &path : nullptr);
  });
}

ACCEL_API accel_status accel_state_writer_write(accel_state_writer* writer, const void* data,
                                                size_t size) {
  return guarded([&] {
    checked(writer, "writer");
    if (size > 0) require(data, "data");
    writer->bytes.append(static_cast<const char*>(data), size);
  });
}

ACCEL_API accel_status accel_register_for_checkpointing(accel_accelerator* accelerator,
                                                        accel_state_save_fn save,
                                                        accel_state_load_fn load, void* user_data,
                                                        accel_release_fn release) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    if (!save || !load)
      fail(Errc::invalid_argument,
           std::string(!save ? "save" : "load") + " is NULL: both callbacks are required");
    auto keep = std::make_shared<Release>(Release{release, user_data});
    accel::prepare::Session::CustomObject object;
    object.save = [save, user_data, keep] {
      accel_state_writer writer;
      const int32_t rc = save(&writer, user_data);
      if (rc != 0) fail(Errc::callback, "its save callback returned " + std::to_string(rc));
      return std::move(writer.bytes);
    };
    object.load = [load, user_data, keep](const std::string& bytes) {
      const int32_t rc = load(bytes.data(), bytes.size(), user_data);
      if (rc != 0) fail(Errc::callback, "its load callback returned " + std::to_string(rc));
    };
    FamilyLock lock(accelerator->family);
    core.session().register_custom(std::move(object));
    keep->armed = true;
  });
}

}  // extern "C"
