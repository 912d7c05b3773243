/* What the C benchmark programs share: failing loudly on a libaccel error, and clocks. */
#ifndef ACCEL_BENCH_UTIL_H
#define ACCEL_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <accel/accel.h>

#define CHECK(call)                                                         \
  do {                                                                      \
    accel_status st_ = (call);                                              \
    if (st_ != ACCEL_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                  \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

/* Calls a method that returns one tensor (the loss); the caller frees it. */
static inline accel_tensor* call_one(accel_model* model, const char* method,
                                     accel_tensor* const* inputs, size_t count) {
  accel_tensor_list* outputs = NULL;
  accel_tensor* result = NULL;
  CHECK(accel_model_call(model, method, (const accel_tensor* const*)inputs, count, &outputs));
  CHECK(accel_tensor_list_get(outputs, 0, &result));
  accel_tensor_list_free(outputs);
  return result;
}

/* Seconds on the monotonic clock, for durations. */
static inline double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds since the epoch, comparable with the time another process (the bench driver) took. */
static inline double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
