/* What the package's cgo preambles share: the header, its version check, and the C side of the
 * callbacks (shim.c). */
#ifndef ACCEL_GO_SHIM_H
#define ACCEL_GO_SHIM_H

#include <stdint.h>
#include <stdlib.h>

#include <accel/accel.h>

/* The package binds ABI 0.2 (see accel.h, "Versions"): another header must not compile. */
#if ACCEL_VERSION_MAJOR != 0 || ACCEL_VERSION_MINOR != 2
#error "package accel binds libaccel's ABI 0.2; the accel.h found is another version"

#endif

/* The callbacks' user_data is a C-allocated box holding a runtime/cgo.Handle, never a Go
 * pointer: C keeps it after the registering call returns. The release function frees both. */
accel_status goaccel_dataset_from_callback(int64_t sample_count, size_t field_count,
                                           const accel_dtype* dtypes, const size_t* dim_counts,
                                           const int64_t* dims, uintptr_t* box,
                                           accel_dataset** out);
/* The ragged form, with goaccelSampleLengths as the length callback. */
accel_status goaccel_dataset_from_ragged_callback(int64_t sample_count, size_t field_count,
                                                  const accel_dtype* dtypes,
                                                  const size_t* dim_counts, const int64_t* dims,
                                                  uintptr_t* box, accel_dataset** out);
/* A stream, with goaccelStreamSample as the sample callback. */
accel_status goaccel_dataset_from_stream(size_t field_count, const accel_dtype* dtypes,
                                         const size_t* dim_counts, const int64_t* dims,
                                         uintptr_t* box, accel_dataset** out);
accel_status goaccel_register_for_checkpointing(accel_accelerator* accelerator, uintptr_t* box);
/* A custom tracker: goaccelTrackerStart, goaccelTrackerLog and goaccelTrackerFinish. */
accel_status goaccel_add_tracker(accel_accelerator* accelerator, const char* name, uintptr_t* box);
/* The accelerator's log sink: goaccelLogSink. */
accel_status goaccel_set_log_sink(accel_accelerator* accelerator, uintptr_t* box);
/* find_executable_batch_size with goaccelBatchSize as the function; the box lives for the call. */
accel_status goaccel_find_executable_batch_size(accel_accelerator* accelerator, int64_t start,
                                                uintptr_t* box, int64_t* out);
/* accel_load_pretrained_mapped with goaccelNameMap as the map; the box lives for the call. */
accel_status goaccel_load_pretrained_mapped(accel_model* model, const char* path,
                                            const char* options, uintptr_t* box,
                                            accel_load_report** out);
/* The profiler's trace-ready callback: goaccelTraceReady (NULL box: none). The library keeps the
 * box without a release function: profiler.go frees it after the profiler or its replacement. */
accel_status goaccel_profiler_set_on_trace_ready(accel_profiler* profiler, uintptr_t* box);
/* The Trainer's steps, compute_metrics and callbacks: goaccelTrainingStep, goaccelEvalStep,
 * goaccelComputeMetrics, goaccelTrainerEvent, released by goaccelRelease; a NULL box (not for
 * callbacks) restores the default. */
accel_status goaccel_trainer_set_training_step(accel_trainer* trainer, uintptr_t* box);
accel_status goaccel_trainer_set_eval_step(accel_trainer* trainer, uintptr_t* box);
accel_status goaccel_trainer_set_compute_metrics(accel_trainer* trainer, uintptr_t* box);
accel_status goaccel_trainer_add_callback(accel_trainer* trainer, uintptr_t* box);
/* The calling OS thread, as a number (pthread_self): trackers.go tells a tracker callback's own
 * call into the trackers from another goroutine's with it. */
uintptr_t goaccel_thread_id(void);

/* accel_tensor_from_data through arguments that cgo need not check at run time (bytes, and the
 * tensor as the result rather than through a pointer to it): the hottest call, see tensor.go. */
accel_tensor* goaccel_tensor_from_data(const uint8_t* data, size_t size, accel_dtype dtype,
                                       const int64_t* shape, size_t dim_count,
                                       accel_status* status);

#endif
