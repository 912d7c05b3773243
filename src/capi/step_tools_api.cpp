// The training-step helpers around the step: no_sync, find_executable_batch_size, LocalSGD and
// the profiler; the local main process first pair and is_last_process.
#include "accelerator/batch_size.hpp"
#include "capi/handles.hpp"
#include "common/files.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::core_of;
using accel::capi::fail_with_returned;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

namespace {

std::shared_ptr<accel::prepare::Session> session_of(
    const std::weak_ptr<accel::prepare::Session>& w) {
  auto s = w.lock();
  if (!s) fail(Errc::state, "the accelerator this object was made with has been freed");
  return s;
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_local_main_process_first_begin(accel_accelerator* accelerator) {
  return guarded([&] { core_of(accelerator).main_process_first_begin(true); });
}

ACCEL_API accel_status accel_local_main_process_first_end(accel_accelerator* accelerator) {
  return guarded([&] { core_of(accelerator).main_process_first_end(true); });
}

ACCEL_API accel_status accel_is_last_process(const accel_accelerator* accelerator, bool* out) {
  return accel::capi::query(accelerator, "accelerator", out, [](const accel_accelerator& h) {
    const auto& place = h.core->runtime().place();
    return place.rank == place.world_size - 1;
  });
}

ACCEL_API accel_status accel_no_sync_begin(accel_accelerator* accelerator, accel_model* model) {
  return guarded([&] {
    auto& session = core_of(accelerator).session();
    checked(model, "model");
    FamilyLock lock(accelerator->family);
    session.no_sync_begin(*model->model);
  });
}

ACCEL_API accel_status accel_no_sync_end(accel_accelerator* accelerator, accel_model* model) {
  return guarded([&] {
    auto& session = core_of(accelerator).session();
    checked(model, "model");
    FamilyLock lock(accelerator->family);
    session.no_sync_end(*model->model);
  });
}

ACCEL_API accel_status accel_find_executable_batch_size(accel_accelerator* accelerator,
                                                        int64_t starting_batch_size,
                                                        accel_batch_size_fn fn, void* user_data,
                                                        int64_t* out_batch_size) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    if (!fn) fail(Errc::invalid_argument, "fn is NULL");
    require(out_batch_size, "out_batch_size");
    // Recursive: the function's own calls into this family lock it again on this thread.
    FamilyLock lock(accelerator->family);
    *out_batch_size = accel::find_executable_batch_size(core, starting_batch_size, [&](int64_t n) {
      if (const accel_status rc = fn(user_data, n); rc != ACCEL_OK)
        fail_with_returned(rc, "the batch-size function (at batch size " + std::to_string(n) + ")");
    });
  });
}

ACCEL_API accel_status accel_local_sgd_begin(accel_accelerator* accelerator, accel_model* model,
                                             int64_t local_sgd_steps, accel_local_sgd** out) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    checked(model, "model");
    require(out, "out");
    FamilyLock lock(accelerator->family);
    FamilyLock model_lock(model->family);
    auto h = std::make_unique<accel_local_sgd>();
    h->core = std::make_unique<accel::ddp::LocalSgd>(core.session(), model->model, local_sgd_steps);
    h->family = model->family;
    h->session = core.shared_session();
    *out = h.release();
  });
}

ACCEL_API accel_status accel_local_sgd_set(accel_local_sgd* local_sgd, const char* key,
                                           const char* value) {
  return guarded([&] {
    checked(local_sgd, "local_sgd");
    require(key, "key");
    require(value, "value");
    FamilyLock lock(local_sgd->family);
    local_sgd->core->set(key, value);
  });
}

ACCEL_API accel_status accel_local_sgd_step(accel_local_sgd* local_sgd) {
  return guarded([&] {
    checked(local_sgd, "local_sgd");
    FamilyLock lock(local_sgd->family);
    local_sgd->core->step(*session_of(local_sgd->session));
  });
}

ACCEL_API accel_status accel_local_sgd_end(accel_local_sgd* local_sgd) {
  return guarded([&] {
    checked(local_sgd, "local_sgd");
    FamilyLock lock(local_sgd->family);
    if (local_sgd->core->ended()) return;
    local_sgd->core->end(*session_of(local_sgd->session));
  });
}

ACCEL_API accel_status accel_local_sgd_average_count(const accel_local_sgd* local_sgd,
                                                     int64_t* out) {
  return accel::capi::locked_query(local_sgd, "local_sgd", out,
                                   [](const accel_local_sgd& h) { return h.core->averages(); });
}

ACCEL_API void accel_local_sgd_free(accel_local_sgd* local_sgd) {
  guarded([&] {
    if (!local_sgd) return;
    checked(local_sgd, "local_sgd");
    FamilyLock lock(local_sgd->family);
    if (auto session = local_sgd->session.lock()) local_sgd->core->abandon(*session);
  });
  accel::capi::free_handle(local_sgd, "local_sgd");
}

ACCEL_API accel_status accel_profiler_new(accel_accelerator* accelerator, accel_profiler** out) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    require(out, "out");
    auto h = std::make_unique<accel_profiler>();
    h->session = core.shared_session();
    *out = h.release();
  });
}

ACCEL_API accel_status accel_profiler_set(accel_profiler* profiler, const char* key,
                                          const char* value) {
  return guarded([&] {
    checked(profiler, "profiler");
    require(key, "key");
    require(value, "value");
    profiler->core.set(key, value);
  });
}

ACCEL_API accel_status accel_profiler_set_on_trace_ready(accel_profiler* profiler,
                                                         accel_trace_ready_fn fn, void* user_data) {
  return guarded([&] {
    checked(profiler, "profiler");
    if (!fn) return profiler->core.on_trace_ready({});
    profiler->core.on_trace_ready([profiler, fn, user_data] {
      if (const accel_status rc = fn(user_data, profiler); rc != ACCEL_OK)
        fail(Errc::callback, "the trace-ready callback returned " + std::to_string(rc));
    });
  });
}

ACCEL_API accel_status accel_profiler_start(accel_profiler* profiler) {
  return guarded([&] { checked(profiler, "profiler")->core.start(); });
}

ACCEL_API accel_status accel_profiler_step(accel_profiler* profiler) {
  return guarded([&] { checked(profiler, "profiler")->core.step(); });
}

ACCEL_API accel_status accel_profiler_stop(accel_profiler* profiler) {
  return guarded([&] {
    checked(profiler, "profiler");
    if (!profiler->core.running()) return;
    auto session = session_of(profiler->session);
    accel::end_profile(session->accelerator(), profiler->core);
  });
}

ACCEL_API accel_status accel_profiler_table(const accel_profiler* profiler, const char* sort_by,
                                            int64_t row_limit, char* buf, size_t capacity,
                                            size_t* out_size) {
  return guarded([&] {
    checked(profiler, "profiler");
    if (row_limit < -1) fail(Errc::invalid_argument, "row_limit is below -1");
    accel::capi::write_text(
        accel::profile::summary_table(profiler->core.events(), sort_by ? sort_by : "cpu_time_total",
                                      row_limit),
        buf, capacity, out_size);
  });
}

ACCEL_API accel_status accel_profiler_export_chrome_trace(const accel_profiler* profiler,
                                                          const char* path) {
  return guarded([&] {
    checked(profiler, "profiler");
    require(path, "path");
    auto session = session_of(profiler->session);
    accel::write_file(path, accel::profile::chrome_trace(profiler->core.events(),
                                                         session->accelerator().place().rank));
  });
}

ACCEL_API accel_status accel_profiler_window_count(const accel_profiler* profiler, int64_t* out) {
  return accel::capi::query(profiler, "profiler", out,
                            [](const accel_profiler& h) { return h.core.windows(); });
}

ACCEL_API void accel_profiler_free(accel_profiler* profiler) {
  accel::capi::free_handle(profiler, "profiler");
}

}  // extern "C"
