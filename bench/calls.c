/* The cost of one call through the C interface, the reference for the bindings' own call benches
 * (bench/binding_calls.sh): a one-element tensor made and freed, an element-count query, and a sum
 * of a one-element tensor across the processes. Run as `accel launch -n 2 calls_bench
 * [iterations]`; rank 0 prints one line per measure, in ns per call, the best of 5 repetitions
 * after a warm-up. */
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"

enum { kRepetitions = 5 };

static accel_tensor* one_element(float value) {
  const int64_t shape[1] = {1};
  accel_tensor* t = NULL;
  CHECK(accel_tensor_from_data(&value, sizeof value, ACCEL_DTYPE_F32, shape, 1, &t));
  return t;
}

static double create_free(long n) {
  const double start = mono();
  for (long i = 0; i < n; ++i) accel_tensor_free(one_element((float)i));
  return (mono() - start) * 1e9 / (double)n;
}

static volatile int64_t g_sink;

static double query(const accel_tensor* t, long n) {
  const double start = mono();
  for (long i = 0; i < n; ++i) {
    int64_t count = 0;
    CHECK(accel_tensor_element_count(t, &count));
    g_sink += count;
  }
  return (mono() - start) * 1e9 / (double)n;
}

static double allreduce(accel_accelerator* acc, const accel_tensor* t, long n) {
  const double start = mono();
  for (long i = 0; i < n; ++i) {
    accel_tensor* sum = NULL;
    CHECK(accel_reduce(acc, t, ACCEL_REDUCE_SUM, &sum));
    accel_tensor_free(sum);
  }
  return (mono() - start) * 1e9 / (double)n;
}

static double best(double a, double b) {
  return a < b ? a : b;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 200000;
  const long n_collective = n / 400 > 0 ? n / 400 : 1;
  accel_accelerator* acc = NULL;
  CHECK(accel_init(NULL, &acc));
  accel_tensor* t = one_element(1.0f);
  /* Warm-up: the allocator's caches, the branch predictor, the collective's first connection. */
  create_free(n / 10);
  query(t, n / 10);
  allreduce(acc, t, n_collective / 10 + 1);
  double c = 1e300, q = 1e300, r = 1e300;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    c = best(c, create_free(n));
    q = best(q, query(t, n));
    r = best(r, allreduce(acc, t, n_collective));
  }
  int32_t rank = 0;
  CHECK(accel_process_index(acc, &rank));
  if (rank == 0) printf("create_free_ns %.1f\nquery_ns %.1f\nallreduce_ns %.1f\n", c, q, r);
  accel_tensor_free(t);
  accel_accelerator_free(acc);
  return 0;
}
