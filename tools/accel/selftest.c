/*
 * accel-selftest: what `accel test` launches on every process of the configured setup. Checks, in
 * order, that the processes meet and exchange tensors (collectives), train together (a few steps
 * of a small model with gradient synchronisation; parameters must stay equal on every rank), and
 * save and restore their state (save_state, a step more, load_state: parameters exactly back). The
 * main process reports one line per check; the exit status is 0 only if every check passed on
 * every rank. Written against accel.h only, as any user program.
 *
 *   ACCEL_TEST_DIR  where the checkpoint goes (accel test makes and removes it)
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <accel/accel.h>

static int g_rank = 0;
static int g_world = 1;
static char g_why[2048]; /* the first failure of the running check */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int failed(const char* fmt, ...) {
  va_list ap;
  if (g_why[0]) return 1;
  va_start(ap, fmt);
  vsnprintf(g_why, sizeof g_why, fmt, ap);
  va_end(ap);
  return 1;
}

/* A failed call ends the running check with the library's message. */
#define TRY(call)                                                                             \
  do {                                                                                        \
    accel_status st_ = (call);                                                                \
    if (st_ != ACCEL_OK)                                                                      \
      return failed("%s: %s: %s", #call, accel_status_name(st_), accel_last_error_message()); \
  } while (0)

static accel_tensor* floats(const float* v, int64_t n) {
  accel_tensor* t = NULL;
  int64_t shape[1];
  shape[0] = n;
  return accel_tensor_from_data(v, (size_t)n * sizeof(float), ACCEL_DTYPE_F32, shape, 1, &t) ==
                 ACCEL_OK
             ? t
             : NULL;
}

static int check_collectives(accel_accelerator* acc, char* detail, size_t cap) {
  float mine[2], got[2 * 4096], want;
  int64_t n = 0;
  accel_tensor *t = NULL, *out = NULL;
  accel_bytes_list* objects = NULL;
  size_t count = 0, size = 0, i;
  int r;
  char text[64];
  if (g_world > 4096) return failed("more than 4096 processes");
  mine[0] = (float)g_rank;
  mine[1] = (float)(g_rank * 10);
  t = floats(mine, 2);
  if (!t) return failed("tensor: %s", accel_last_error_message());
  TRY(accel_gather(acc, t, &out));
  TRY(accel_tensor_element_count(out, &n));
  if (n != 2 * g_world) return failed("gather returned %lld values", (long long)n);
  TRY(accel_tensor_to_data(out, got, sizeof got, &size));
  accel_tensor_free(out);
  for (r = 0; r < g_world; ++r)
    if (got[2 * r] != (float)r || got[2 * r + 1] != (float)(r * 10))
      return failed("gather: rank %d's values arrived as %g %g", r, got[2 * r], got[2 * r + 1]);
  TRY(accel_reduce(acc, t, ACCEL_REDUCE_SUM, &out));
  TRY(accel_tensor_to_data(out, got, sizeof got, &size));
  accel_tensor_free(out);
  want = (float)g_world * (float)(g_world - 1) / 2.0f;
  if (got[0] != want) return failed("reduce sum: %g, expected %g", got[0], want);
  TRY(accel_broadcast(acc, g_rank == g_world - 1 ? t : NULL, g_world - 1, &out));
  TRY(accel_tensor_to_data(out, got, sizeof got, &size));
  accel_tensor_free(out);
  if (got[0] != (float)(g_world - 1))
    return failed("broadcast from the last rank delivered %g", got[0]);
  accel_tensor_free(t);
  snprintf(text, sizeof text, "rank %d", g_rank);
  TRY(accel_gather_object(acc, text, strlen(text), &objects));
  TRY(accel_bytes_list_count(objects, &count));
  for (i = 0; i < count; ++i) {
    const void* data = NULL;
    char expect[64];
    TRY(accel_bytes_list_get(objects, i, &data, &size));
    snprintf(expect, sizeof expect, "rank %d", (int)i);
    if (size != strlen(expect) || memcmp(data, expect, size) != 0)
      return failed("gather_object: entry %zu is not \"%s\"", i, expect);
  }
  accel_bytes_list_free(objects);
  if (count != (size_t)g_world) return failed("gather_object returned %zu entries", count);
  snprintf(detail, cap, "gather, reduce, broadcast, gather_object across %d process%s", g_world,
           g_world > 1 ? "es" : "");
  return 0;
}

typedef struct {
  accel_model* model;
  accel_optimizer* opt;
  accel_dataloader* loader;
  accel_dataset* data;
} Training;

static void free_training(Training* tr) {
  accel_optimizer_free(tr->opt);
  accel_model_free(tr->model);
  accel_dataloader_free(tr->loader);
  accel_dataset_free(tr->data);
  memset(tr, 0, sizeof *tr);
}

/* The self-test's model: two linear layers and a training step. */
static int new_model(accel_model** out) {
  TRY(accel_model_new(out));
  TRY(accel_model_add_layer(*out, "fc1", "linear", "in_features=8 out_features=16"));
  TRY(accel_model_add_layer(*out, "fc2", "linear", "in_features=16 out_features=2"));
  TRY(accel_model_define(*out,
                         "def training_step(self, x, y):\n"
                         "    out = self.fc2.forward(torch.relu(self.fc1.forward(x)))\n"
                         "    return torch.cross_entropy_loss(out, y)\n"));
  return 0;
}

static int build_training(accel_accelerator* acc, Training* tr) {
  enum { kSamples = 256, kIn = 8 };
  static float x[kSamples * kIn];
  static int64_t y[kSamples];
  int64_t xs[2] = {kSamples, kIn}, ys[1] = {kSamples};
  accel_tensor *tx = NULL, *ty = NULL;
  const accel_tensor* fields[2];
  void* objects[3];
  int i, j;
  /* A separable problem the model learns within a few steps. */
  for (i = 0; i < kSamples; ++i) {
    float s = 0;
    for (j = 0; j < kIn; ++j) {
      x[i * kIn + j] = (float)((i * 31 + j * 17) % 23) / 23.0f - 0.5f;
      s += x[i * kIn + j] * (j % 2 ? 1.0f : -1.0f);
    }
    y[i] = s > 0;
  }
  TRY(accel_tensor_from_data(x, sizeof x, ACCEL_DTYPE_F32, xs, 2, &tx));
  TRY(accel_tensor_from_data(y, sizeof y, ACCEL_DTYPE_I64, ys, 1, &ty));
  fields[0] = tx;
  fields[1] = ty;
  TRY(accel_dataset_from_tensors(fields, 2, &tr->data));
  accel_tensor_free(tx);
  accel_tensor_free(ty);
  TRY(accel_dataloader_new(acc, tr->data, &tr->loader));
  TRY(accel_dataloader_set(tr->loader, "batch_size", "16"));
  TRY(accel_set_seed(acc, 1234, false));
  if (new_model(&tr->model)) return 1;
  TRY(accel_optimizer_new(tr->model, "sgd", &tr->opt));
  TRY(accel_optimizer_set(tr->opt, "lr", "0.5"));
  objects[0] = tr->model;
  objects[1] = tr->opt;
  objects[2] = tr->loader;
  TRY(accel_prepare(acc, objects, 3));
  return 0;
}

/* One pass over this rank's shard; `*mean_loss` is the mean over every rank. */
static int train_epoch(accel_accelerator* acc, Training* tr, double* mean_loss, int* steps) {
  double sum = 0;
  int n = 0;
  float local[2];
  accel_tensor *t = NULL, *total = NULL;
  size_t size = 0;
  for (;;) {
    accel_tensor *f[2] = {NULL, NULL}, *loss = NULL;
    accel_tensor_list* outputs = NULL;
    size_t count = 0;
    float value = 0;
    TRY(accel_dataloader_next(tr->loader, f, 2, &count));
    if (count == 0) break;
    TRY(accel_model_call(tr->model, "training_step", (const accel_tensor* const*)f, 2, &outputs));
    TRY(accel_tensor_list_get(outputs, 0, &loss));
    accel_tensor_list_free(outputs);
    TRY(accel_backward(acc, loss));
    TRY(accel_optimizer_step(tr->opt));
    TRY(accel_optimizer_zero_grad(tr->opt));
    TRY(accel_tensor_to_data(loss, &value, sizeof value, &size));
    sum += value;
    ++n;
    accel_tensor_free(loss);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
  }
  local[0] = (float)sum;
  local[1] = (float)n;
  t = floats(local, 2);
  if (!t) return failed("tensor: %s", accel_last_error_message());
  TRY(accel_reduce(acc, t, ACCEL_REDUCE_SUM, &total));
  TRY(accel_tensor_to_data(total, local, sizeof local, &size));
  accel_tensor_free(t);
  accel_tensor_free(total);
  *mean_loss = local[1] > 0 ? local[0] / local[1] : NAN;
  *steps = n;
  return 0;
}

/* Every parameter of `model`, concatenated, into `buf` (capacity in floats); the count in `*n`.
   `*absent`: a parameter is not on this rank (ZeRO stage 3), nothing read. */
static int read_parameters(const accel_model* model, float* buf, size_t cap, size_t* n,
                           int* absent) {
  size_t count = 0, i, size = 0, name_size = 0;
  *n = 0;
  *absent = 0;
  TRY(accel_model_tensor_count(model, &count));
  for (i = 0; i < count; ++i) {
    char name[256];
    accel_tensor* t = NULL;
    int64_t elems = 0;
    accel_status st;
    TRY(accel_model_tensor_name(model, i, name, sizeof name, &name_size));
    st = accel_model_tensor(model, name, &t);
    if (st == ACCEL_ERR_STATE) {
      *absent = 1;
      return 0;
    }
    TRY(st);
    TRY(accel_tensor_element_count(t, &elems));
    if (*n + (size_t)elems > cap) return failed("model larger than expected");
    TRY(accel_tensor_to_data(t, buf + *n, (cap - *n) * sizeof(float), &size));
    *n += (size_t)elems;
    accel_tensor_free(t);
  }
  return 0;
}

/* The model's parameters on this rank. Under ZeRO stage 3 no rank holds them all between steps
   (the ranks agree on that): then every rank writes them with save_model, which gathers them,
   into `scratch`, and reads that file into a new model. `*sharded` says which. */
static int parameters(accel_accelerator* acc, const accel_model* model, const char* scratch,
                      float* buf, size_t cap, size_t* n, int* sharded) {
  int absent = 0;
  float flag;
  size_t size = 0;
  accel_tensor *t = NULL, *any = NULL;
  accel_model* copy = NULL;
  if (read_parameters(model, buf, cap, n, &absent)) return 1;
  flag = (float)absent;
  t = floats(&flag, 1);
  if (!t) return failed("tensor: %s", accel_last_error_message());
  TRY(accel_reduce(acc, t, ACCEL_REDUCE_MAX, &any));
  TRY(accel_tensor_to_data(any, &flag, sizeof flag, &size));
  accel_tensor_free(t);
  accel_tensor_free(any);
  *sharded = flag > 0;
  if (!*sharded) return 0;
  if (!scratch || !*scratch) return failed("ACCEL_TEST_DIR is not set");
  TRY(accel_save_model(acc, model, scratch, NULL));
  if (new_model(&copy)) return 1;
  TRY(accel_load_checkpoint_in_model(copy, scratch));
  if (read_parameters(copy, buf, cap, n, &absent)) return 1;
  accel_model_free(copy);
  return absent ? failed("a model loaded from save_model's file lacks a parameter") : 0;
}

static float g_params[4096], g_saved[4096];
static char g_scratch[1024]; /* where stage 3's parameters are gathered: ACCEL_TEST_DIR.params */

static int check_training(accel_accelerator* acc, Training* tr, char* detail, size_t cap) {
  double first = 0, last = 0;
  int epoch, steps = 0;
  size_t n = 0, i;
  int sharded = 0;
  accel_tensor *t = NULL, *all = NULL;
  float* every;
  size_t size = 0;
  int r;
  if (build_training(acc, tr)) return 1;
  for (epoch = 0; epoch < 3; ++epoch) {
    double loss = 0;
    if (train_epoch(acc, tr, &loss, &steps)) return 1;
    if (epoch == 0) first = loss;
    last = loss;
  }
  if (!(last < first)) return failed("the loss did not fall: %.4f -> %.4f", first, last);
  /* Gradient synchronisation keeps the replicas identical: compare every rank's parameters. */
  if (parameters(acc, tr->model, g_scratch, g_params, 4096, &n, &sharded)) return 1;
  t = floats(g_params, (int64_t)n);
  if (!t) return failed("tensor: %s", accel_last_error_message());
  TRY(accel_gather(acc, t, &all));
  every = malloc(n * (size_t)g_world * sizeof(float));
  if (!every) return failed("out of memory");
  if (accel_tensor_to_data(all, every, n * (size_t)g_world * sizeof(float), &size) != ACCEL_OK) {
    free(every);
    return failed("tensor_to_data: %s", accel_last_error_message());
  }
  for (r = 1; r < g_world; ++r)
    for (i = 0; i < n; ++i)
      if (every[(size_t)r * n + i] != every[i]) {
        free(every);
        return failed("rank %d's parameters differ from rank 0's after training", r);
      }
  free(every);
  accel_tensor_free(t);
  accel_tensor_free(all);
  snprintf(detail, cap, "3 epochs of %d steps per process, mean loss %.3f -> %.3f, %s", steps,
           first, last,
           sharded ? "parameters sharded (ZeRO stage 3), gathered whole by save_model"
                   : "parameters equal on every rank");
  return 0;
}

static int check_checkpoint(accel_accelerator* acc, Training* tr, const char* dir, char* detail,
                            size_t cap) {
  size_t n = 0, m = 0, i;
  int sharded = 0;
  double loss = 0;
  int steps = 0;
  if (!dir || !*dir) return failed("ACCEL_TEST_DIR is not set");
  if (!tr->model) return failed("training did not set up, nothing to save");
  if (parameters(acc, tr->model, g_scratch, g_saved, 4096, &n, &sharded)) return 1;
  TRY(accel_save_state(acc, dir));
  if (train_epoch(acc, tr, &loss, &steps)) return 1; /* moves the parameters away */
  if (parameters(acc, tr->model, g_scratch, g_params, 4096, &m, &sharded)) return 1;
  if (m == n && memcmp(g_params, g_saved, n * sizeof(float)) == 0)
    return failed("a training epoch did not change the parameters");
  TRY(accel_load_state(acc, dir));
  if (parameters(acc, tr->model, g_scratch, g_params, 4096, &m, &sharded)) return 1;
  if (m != n) return failed("load_state restored %zu values, %zu saved", m, n);
  for (i = 0; i < n; ++i)
    if (g_params[i] != g_saved[i])
      return failed("parameter value %zu is %g after load_state, %g was saved", i, g_params[i],
                    g_saved[i]);
  snprintf(detail, cap, "save_state, one more epoch, load_state: all %zu parameter values back", n);
  return 0;
}

int main(void) {
  accel_accelerator* acc = NULL;
  accel_distribution dist = ACCEL_DISTRIBUTED_NO;
  accel_precision precision = ACCEL_PRECISION_NO;
  bool main_process = false;
  Training tr;
  const char* names[3] = {"collectives", "training", "checkpoint"};
  int check, failures = 0;
  char dist_text[32] = "?", mp[16] = "?";
  size_t len = 0;
  accel_status st = accel_init(NULL, &acc);
  const char* test_dir = getenv("ACCEL_TEST_DIR");
  memset(&tr, 0, sizeof tr);
  if (test_dir) snprintf(g_scratch, sizeof g_scratch, "%s.params", test_dir);
  if (st != ACCEL_OK) {
    const char* rank = getenv("RANK");
    fprintf(stderr, "accel test: rank %s: accel_init failed: %s: %s\n", rank ? rank : "0",
            accel_status_name(st), accel_last_error_message());
    return 1;
  }
  accel_process_index(acc, &g_rank);
  accel_num_processes(acc, &g_world);
  accel_is_main_process(acc, &main_process);
  accel_distributed_type(acc, &dist);
  accel_mixed_precision(acc, &precision);
  snprintf(dist_text, sizeof dist_text, "%s",
           dist == ACCEL_DISTRIBUTED_MULTI_GPU   ? "MULTI_GPU"
           : dist == ACCEL_DISTRIBUTED_MULTI_CPU ? "MULTI_CPU"
           : dist == ACCEL_DISTRIBUTED_DEEPSPEED ? "DEEPSPEED"
           : dist == ACCEL_DISTRIBUTED_FSDP      ? "FSDP"
                                                 : "NO");
  snprintf(mp, sizeof mp, "%s",
           precision == ACCEL_PRECISION_BF16   ? "bf16"
           : precision == ACCEL_PRECISION_FP16 ? "fp16"
                                               : "no");
  (void)len;
  if (main_process) {
    printf("accel test: %d process%s (%s), mixed precision %s\n", g_world, g_world > 1 ? "es" : "",
           dist_text, mp);
    fflush(stdout);
  }
  for (check = 0; check < 3; ++check) {
    char detail[512] = "";
    double t0 = now();
    int bad;
    float flag;
    accel_tensor *t = NULL, *any = NULL;
    size_t size = 0;
    g_why[0] = '\0';
    bad = check == 0 ? check_collectives(acc, detail, sizeof detail)
          : check == 1
              ? check_training(acc, &tr, detail, sizeof detail)
              : check_checkpoint(acc, &tr, getenv("ACCEL_TEST_DIR"), detail, sizeof detail);
    /* Every rank learns whether any rank failed; a broken group counts as a failure here. */
    flag = (float)bad;
    t = floats(&flag, 1);
    if (t && accel_reduce(acc, t, ACCEL_REDUCE_MAX, &any) == ACCEL_OK &&
        accel_tensor_to_data(any, &flag, sizeof flag, &size) == ACCEL_OK)
      bad = flag > 0;
    else
      bad = 1;
    accel_tensor_free(t);
    accel_tensor_free(any);
    if (g_why[0]) fprintf(stderr, "accel test: rank %d: %s: %s\n", g_rank, names[check], g_why);
    if (main_process) {
      printf("  [%s] %-12s %s (%.2f s)\n", bad ? "FAILED" : "ok", names[check],
             bad ? (g_why[0] ? g_why : "failed on another rank (its message is above)") : detail,
             now() - t0);
      fflush(stdout);
    }
    failures += bad;
  }
  free_training(&tr);
  accel_accelerator_free(acc);
  return failures ? 1 : 0;
}
