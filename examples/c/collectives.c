/*
 * collectives.c - libaccel's runtime from C: where am I, and every collective once.
 *
 *   accel launch -n 2 ./collectives
 *
 * Each rank contributes a tensor that depends on its rank; the main process prints what came back.
 * Run alone (./collectives) it is a world of one and every collective is the identity.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <accel/accel.h>

/* Stops the program with the library's message when a call fails. */
#define CHECK(call)                                                         \
  do {                                                                      \
    accel_status st_ = (call);                                              \
    if (st_ != ACCEL_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                  \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static void print_tensor(accel_accelerator* acc, const char* label, const accel_tensor* t) {
  int64_t shape[ACCEL_MAX_DIMS];
  size_t ndim = 0, size = 0;
  int64_t numel = 0;
  char line[1024];
  int n;
  int64_t i;
  float* values;
  accel_dtype dtype;
  CHECK(accel_tensor_shape(t, shape, ACCEL_MAX_DIMS, &ndim));
  CHECK(accel_tensor_element_count(t, &numel));
  CHECK(accel_tensor_dtype(t, &dtype));
  n = snprintf(line, sizeof line, "%-24s shape [", label);
  for (i = 0; i < (int64_t)ndim; ++i)
    n += snprintf(line + n, sizeof line - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  n += snprintf(line + n, sizeof line - (size_t)n, "] values");
  if (dtype == ACCEL_DTYPE_F32) {
    values = malloc((size_t)numel * sizeof(float) + 1);
    CHECK(accel_tensor_to_data(t, values, (size_t)numel * sizeof(float), &size));
    for (i = 0; i < numel && n < (int)sizeof line - 16; ++i)
      n += snprintf(line + n, sizeof line - (size_t)n, " %g", values[i]);
    free(values);
  }
  CHECK(accel_print(acc, line));
}

int main(void) {
  accel_accelerator* acc = NULL;
  int32_t rank = 0, world = 1, local_rank = 0, r;
  bool is_main = false;
  char device[64];
  size_t device_len = 0;
  accel_distribution dist;
  accel_precision mp;
  char banner[256];

  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_num_processes(acc, &world));
  CHECK(accel_local_process_index(acc, &local_rank));
  CHECK(accel_is_main_process(acc, &is_main));
  CHECK(accel_device(acc, device, sizeof device, &device_len));
  CHECK(accel_distributed_type(acc, &dist));
  CHECK(accel_mixed_precision(acc, &mp));
  CHECK(accel_set_seed(acc, 42, false));

  printf("rank %d of %d (local rank %d) on %s%s\n", rank, world, local_rank, device,
         is_main ? ", main process" : "");
  fflush(stdout);
  CHECK(accel_wait_for_everyone(acc));
  snprintf(banner, sizeof banner, "distributed type %s, mixed precision %s, libaccel %s",
           dist == ACCEL_DISTRIBUTED_NO          ? "NO"
           : dist == ACCEL_DISTRIBUTED_MULTI_CPU ? "MULTI_CPU"
           : dist == ACCEL_DISTRIBUTED_MULTI_GPU ? "MULTI_GPU"
           : dist == ACCEL_DISTRIBUTED_DEEPSPEED ? "DEEPSPEED"
                                                 : "FSDP",
           mp == ACCEL_PRECISION_NO     ? "no"
           : mp == ACCEL_PRECISION_BF16 ? "bf16"
                                        : "fp16",
           accel_version());
  CHECK(accel_print(acc, banner));

  {
    /* gather: rank r contributes [r*10, r*10+1]; everyone gets [0, 1, 10, 11, ...]. */
    float mine[2];
    int64_t shape[1] = {2};
    accel_tensor *t = NULL, *all = NULL;
    mine[0] = (float)(rank * 10);
    mine[1] = (float)(rank * 10 + 1);
    CHECK(accel_tensor_from_data(mine, sizeof mine, ACCEL_DTYPE_F32, shape, 1, &t));
    CHECK(accel_gather(acc, t, &all));
    print_tensor(acc, "gather", all);
    accel_tensor_free(all);
    accel_tensor_free(t);
  }
  {
    /* pad_across_processes: rank r holds r+1 ones; padded with -1 to the longest, then gathered. */
    float ones[16];
    int64_t shape[1];
    accel_tensor *t = NULL, *padded = NULL, *all = NULL;
    for (r = 0; r < 16; ++r) ones[r] = 1.0f;
    shape[0] = rank + 1 > 16 ? 16 : rank + 1;
    CHECK(accel_tensor_from_data(ones, (size_t)shape[0] * sizeof(float), ACCEL_DTYPE_F32, shape, 1,
                                 &t));
    CHECK(accel_pad_across_processes(acc, t, 0, -1.0, false, &padded));
    CHECK(accel_gather(acc, padded, &all));
    print_tensor(acc, "pad + gather", all);
    accel_tensor_free(all);
    accel_tensor_free(padded);
    accel_tensor_free(t);
  }
  {
    /* reduce: sum and mean of (rank + 1). */
    float v = (float)(rank + 1);
    accel_tensor *t = NULL, *sum = NULL, *mean = NULL;
    CHECK(accel_tensor_from_data(&v, sizeof v, ACCEL_DTYPE_F32, NULL, 0, &t));
    CHECK(accel_reduce(acc, t, ACCEL_REDUCE_SUM, &sum));
    CHECK(accel_reduce(acc, t, ACCEL_REDUCE_MEAN, &mean));
    print_tensor(acc, "reduce sum of rank+1", sum);
    print_tensor(acc, "reduce mean of rank+1", mean);
    accel_tensor_free(mean);
    accel_tensor_free(sum);
    accel_tensor_free(t);
  }
  {
    /* broadcast from the last rank: only it needs a tensor. */
    float v[3] = {3.5f, 4.5f, 5.5f};
    int64_t shape[1] = {3};
    accel_tensor *t = NULL, *got = NULL;
    if (rank == world - 1)
      CHECK(accel_tensor_from_data(v, sizeof v, ACCEL_DTYPE_F32, shape, 1, &t));
    CHECK(accel_broadcast(acc, t, world - 1, &got));
    print_tensor(acc, "broadcast from last rank", got);
    accel_tensor_free(got);
    accel_tensor_free(t);
  }
  {
    /* gather_object: bytes of any length per rank. */
    char text[64];
    accel_bytes_list* list = NULL;
    size_t count = 0, i;
    snprintf(text, sizeof text, "hello from rank %d", rank);
    CHECK(accel_gather_object(acc, text, strlen(text), &list));
    CHECK(accel_bytes_list_count(list, &count));
    for (i = 0; i < count; ++i) {
      const void* data = NULL;
      size_t size = 0;
      char line[128];
      CHECK(accel_bytes_list_get(list, i, &data, &size));
      snprintf(line, sizeof line, "gather_object[%zu]       \"%.*s\"", i, (int)size,
               (const char*)data);
      CHECK(accel_print(acc, line));
    }
    accel_bytes_list_free(list);
  }
  CHECK(accel_wait_for_everyone(acc));
  accel_accelerator_free(acc);
  return 0;
}
