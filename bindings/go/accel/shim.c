// The C half of the callbacks: passes the Go trampolines (callbacks.go) to the library; and the
// create call of tensor.go's hot path. It lives in its own file because cgo forbids C
// definitions in a file with //export.
#include "shim.h"

#include <pthread.h>

#include "_cgo_export.h"

accel_status goaccel_dataset_from_callback(int64_t sample_count, size_t field_count,
                                           const accel_dtype* dtypes, const size_t* dim_counts,
                                           const int64_t* dims, uintptr_t* box,
                                           accel_dataset** out) {
  return accel_dataset_from_callback(sample_count, field_count, dtypes, dim_counts, dims,
                                     (accel_sample_fn)goaccelSample, box,
                                     (accel_release_fn)goaccelRelease, out);
}

accel_status goaccel_dataset_from_ragged_callback(int64_t sample_count, size_t field_count,
                                                  const accel_dtype* dtypes,
                                                  const size_t* dim_counts, const int64_t* dims,
                                                  uintptr_t* box, accel_dataset** out) {
  return accel_dataset_from_ragged_callback(sample_count, field_count, dtypes, dim_counts, dims,
                                            (accel_sample_length_fn)goaccelSampleLengths,
                                            (accel_sample_fn)goaccelSample, box,
                                            (accel_release_fn)goaccelRelease, out);
}

accel_status goaccel_dataset_from_stream(size_t field_count, const accel_dtype* dtypes,
                                         const size_t* dim_counts, const int64_t* dims,
                                         uintptr_t* box, accel_dataset** out) {
  return accel_dataset_from_stream(field_count, dtypes, dim_counts, dims,
                                   (accel_stream_fn)goaccelStreamSample, box,
                                   (accel_release_fn)goaccelRelease, out);
}

accel_status goaccel_register_for_checkpointing(accel_accelerator* accelerator, uintptr_t* box) {
  return accel_register_for_checkpointing(accelerator, (accel_state_save_fn)goaccelSave,
                                          (accel_state_load_fn)goaccelLoad, box,
                                          (accel_release_fn)goaccelRelease);
}

accel_status goaccel_add_tracker(accel_accelerator* accelerator, const char* name,
                                 uintptr_t* box) {
  return accel_add_tracker(accelerator, name, (accel_tracker_start_fn)goaccelTrackerStart,
                           (accel_tracker_log_fn)goaccelTrackerLog,
                           (accel_tracker_finish_fn)goaccelTrackerFinish, box,
                           (accel_release_fn)goaccelRelease);
}

accel_status goaccel_set_log_sink(accel_accelerator* accelerator, uintptr_t* box) {
  return accel_set_log_sink(accelerator, (accel_log_sink_fn)goaccelLogSink, box,
                            (accel_release_fn)goaccelRelease);
}

accel_status goaccel_find_executable_batch_size(accel_accelerator* accelerator, int64_t start,
                                                uintptr_t* box, int64_t* out) {
  return accel_find_executable_batch_size(accelerator, start,
                                          (accel_batch_size_fn)goaccelBatchSize, box, out);
}

accel_status goaccel_load_pretrained_mapped(accel_model* model, const char* path,
                                            const char* options, uintptr_t* box,
                                            accel_load_report** out) {
  return accel_load_pretrained_mapped(model, path, options, (accel_name_map_fn)goaccelNameMap,
                                      box, out);
}

accel_status goaccel_profiler_set_on_trace_ready(accel_profiler* profiler, uintptr_t* box) {
  return accel_profiler_set_on_trace_ready(
      profiler, box ? (accel_trace_ready_fn)goaccelTraceReady : NULL, box);
}

accel_status goaccel_trainer_set_training_step(accel_trainer* trainer, uintptr_t* box) {
  if (!box) return accel_trainer_set_training_step(trainer, NULL, NULL, NULL);
  return accel_trainer_set_training_step(trainer, (accel_training_step_fn)goaccelTrainingStep, box,
                                         (accel_release_fn)goaccelRelease);
}

accel_status goaccel_trainer_set_eval_step(accel_trainer* trainer, uintptr_t* box) {
  if (!box) return accel_trainer_set_eval_step(trainer, NULL, NULL, NULL);
  return accel_trainer_set_eval_step(trainer, (accel_eval_step_fn)goaccelEvalStep, box,
                                     (accel_release_fn)goaccelRelease);
}

accel_status goaccel_trainer_set_compute_metrics(accel_trainer* trainer, uintptr_t* box) {
  if (!box) return accel_trainer_set_compute_metrics(trainer, NULL, NULL, NULL);
  return accel_trainer_set_compute_metrics(trainer, (accel_compute_metrics_fn)goaccelComputeMetrics,
                                           box, (accel_release_fn)goaccelRelease);
}

accel_status goaccel_trainer_add_callback(accel_trainer* trainer, uintptr_t* box) {
  return accel_trainer_add_callback(trainer, (accel_trainer_callback_fn)goaccelTrainerEvent, box,
                                    (accel_release_fn)goaccelRelease);
}

uintptr_t goaccel_thread_id(void) { return (uintptr_t)pthread_self(); }

accel_tensor* goaccel_tensor_from_data(const uint8_t* data, size_t size, accel_dtype dtype,
                                       const int64_t* shape, size_t dim_count,
                                       accel_status* status) {
  accel_tensor* out = NULL;
  *status = accel_tensor_from_data(data, size, dtype, shape, dim_count, &out);
  return out;
}
