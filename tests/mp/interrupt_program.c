/* accel_set_interrupted on real processes, for MultiProcess.Interrupt* in mp_test.cpp:
 *   interrupt_program barrier|reduce   (2 ranks) rank 0 is interrupted from another thread while
 *       rank 1 is 3 s late; its call must return ACCEL_ERR_CANCELLED long before, and the process
 *       group be unusable after (ACCEL_ERR_STATE) even once the interruption is cleared.
 *   interrupt_program loader           (1 rank) next waits for a worker 1 s slow on sample 0; the
 *       interruption ends the wait, and once cleared next returns samples 0 and 1: nothing lost.
 * Prints "interrupted after S s" and "ok" lines the test reads. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"

#define CHECK(call)                                                         \
  do {                                                                      \
    accel_status st_ = (call);                                              \
    if (st_ != ACCEL_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                  \
      return 1;                                                             \
    }                                                                       \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* The program's watcher: interrupts the accelerator 300 ms after it starts. */
static void* interrupt_later(void* acc) {
  sleep_ms(300);
  accel_set_interrupted((accel_accelerator*)acc, 1);
  return NULL;
}

static accel_status collective(accel_accelerator* acc, const char* mode) {
  float value = 1.0f;
  accel_tensor *t = NULL, *out = NULL;
  accel_status st;
  if (strcmp(mode, "barrier") == 0) return accel_wait_for_everyone(acc);
  int64_t shape[1] = {1};
  st = accel_tensor_from_data(&value, sizeof value, ACCEL_DTYPE_F32, shape, 1, &t);
  if (st != ACCEL_OK) return st;
  st = accel_reduce(acc, t, ACCEL_REDUCE_SUM, &out);
  accel_tensor_free(t);
  accel_tensor_free(out);
  return st;
}

/* Sample i is the float 10 i; sample 0 takes a second to make. */
static int32_t slow_first(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                          void* user_data) {
  (void)sizes, (void)count, (void)user_data;
  if (index == 0) sleep_ms(1000);
  *(float*)buffers[0] = 10.0f * (float)index;
  return 0;
}

static int next_value(accel_dataloader* loader, float* value) {
  accel_tensor* field = NULL;
  size_t n = 0;
  CHECK(accel_dataloader_next(loader, &field, 1, &n));
  if (n != 1) return 1;
  size_t bytes = 0;
  CHECK(accel_tensor_to_data(field, value, sizeof *value, &bytes));
  accel_tensor_free(field);
  return 0;
}

static int run_loader(accel_accelerator* acc) {
  accel_dtype dtype = ACCEL_DTYPE_F32;
  size_t dims = 0;
  accel_dataset* data = NULL;
  accel_dataloader* loader = NULL;
  accel_tensor* field = NULL;
  size_t n = 0;
  pthread_t watcher;
  float first = -1, second = -1;
  CHECK(accel_dataset_from_callback(4, 1, &dtype, &dims, NULL, slow_first, NULL, NULL, &data));
  CHECK(accel_dataloader_new(acc, data, &loader));
  CHECK(accel_dataloader_set(loader, "batch_size", "1"));
  CHECK(accel_dataloader_set(loader, "num_workers", "1"));
  const double start = now();
  pthread_create(&watcher, NULL, interrupt_later, acc);
  const accel_status st = accel_dataloader_next(loader, &field, 1, &n);
  pthread_join(watcher, NULL);
  printf("interrupted after %.3f s: %s\n", now() - start, accel_status_name(st));
  if (st != ACCEL_ERR_CANCELLED) return 1;
  CHECK(accel_set_interrupted(acc, 0));
  if (next_value(loader, &first) || next_value(loader, &second)) return 1;
  printf("after clearing: %g %g\n", first, second);
  if (first != 0.0f || second != 10.0f) return 1;
  accel_dataloader_free(loader);
  accel_dataset_free(data);
  puts("ok");
  return 0;
}

int main(int argc, char** argv) {
  accel_accelerator* acc = NULL;
  int32_t rank = 0;
  const char* mode = argc > 1 ? argv[1] : "barrier";
  int rc = 0;
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &rank));
  if (strcmp(mode, "loader") == 0) {
    rc = run_loader(acc);
  } else if (rank == 1) {
    sleep_ms(3000);
    /* Rank 0 gave up on this collective: whether it completes here is the transport's affair. */
    printf("rank 1: %s\n", accel_status_name(collective(acc, mode)));
  } else {
    pthread_t watcher;
    const double start = now();
    pthread_create(&watcher, NULL, interrupt_later, acc);
    const accel_status st = collective(acc, mode);
    pthread_join(watcher, NULL);
    printf("interrupted after %.3f s: %s\n", now() - start, accel_status_name(st));
    CHECK(accel_set_interrupted(acc, 0));
    const accel_status again = collective(acc, mode);
    printf("then: %s: %s\n", accel_status_name(again), accel_last_error_message());
    if (st == ACCEL_ERR_CANCELLED && again == ACCEL_ERR_STATE)
      puts("ok");
    else
      rc = 1;
  }
  accel_accelerator_free(acc);
  return rc;
}
