/* A planted bug for each sanitizer run of tools/sanitize.sh, which expects the sanitizer to report
 * it: proof that the options and suppressions in use still see bugs in code that runs inside
 * libaccel's threads and in memory LibTorch allocated.
 *   canary race      two dataloader workers bump an unsynchronised counter in the sample callback
 *                    (TSan must report a data race in fill_racy)
 *   canary overflow  the sample callback writes one byte past the buffer LibTorch allocated for
 *                    the batch (ASan must report a heap-buffer-overflow in fill_overflow)
 * Exits 0 when the bug went unnoticed, which the script treats as a failure of the setup. */
#define _POSIX_C_SOURCE 200809L
#include <accel/accel.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static long g_calls;  /* deliberately unsynchronised */
static int g_arrived; /* relaxed atomics only: they order nothing, for TSan as for the hardware */

/* The first two calls wait (up to 2 s) until both are inside the callback, so the two workers'
 * increments overlap whatever the scheduling: the loader's mutex cannot order them by chance. */
static void meet_the_other_worker(void) {
  struct timespec start, now;
  __atomic_fetch_add(&g_arrived, 1, __ATOMIC_RELAXED);
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (__atomic_load_n(&g_arrived, __ATOMIC_RELAXED) < 2) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= 2) break;
    sched_yield();
  }
}

static int32_t fill_racy(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                         void* user_data) {
  (void)count;
  (void)user_data;
  if (__atomic_load_n(&g_arrived, __ATOMIC_RELAXED) < 2) meet_the_other_worker();
  ++g_calls;
  memset(buffers[0], (int)(index & 0x7f), sizes[0]);
  return 0;
}

static int32_t fill_overflow(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                             void* user_data) {
  (void)count;
  (void)user_data;
  memset(buffers[0], 1, sizes[0]);
  if (index == 7)
    ((unsigned char*)buffers[0])[sizes[0]] = 1; /* sample 7 is the last row of its batch */
  return 0;
}

#define CHECK(call)                                                           \
  do {                                                                        \
    if ((call) != ACCEL_OK) {                                                 \
      fprintf(stderr, "canary: %s: %s\n", #call, accel_last_error_message()); \
      return 2;                                                               \
    }                                                                         \
  } while (0)

int main(int argc, char** argv) {
  const int race = argc > 1 && strcmp(argv[1], "race") == 0;
  const accel_dtype dtypes[] = {ACCEL_DTYPE_F32};
  const size_t dim_counts[] = {1};
  const int64_t dims[] = {16};
  accel_accelerator* acc = NULL;
  accel_dataset* d = NULL;
  accel_dataloader* dl = NULL;
  accel_tensor* batch[1];
  size_t fields = 1;
  int steps = 0;
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_dataset_from_callback(64, 1, dtypes, dim_counts, dims,
                                    race ? fill_racy : fill_overflow, NULL, NULL, &d));
  CHECK(accel_dataloader_new(acc, d, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", "4"));
  CHECK(accel_dataloader_set(dl, "num_workers", race ? "2" : "0"));
  while (accel_dataloader_next(dl, batch, 1, &fields) == ACCEL_OK && fields > 0) {
    accel_tensor_free(batch[0]);
    ++steps;
  }
  accel_dataloader_free(dl);
  accel_dataset_free(d);
  accel_accelerator_free(acc);
  printf("canary: %d batches, %ld calls, no report\n", steps, g_calls);
  return 0;
}
