/*
 * mp_program.c - one rank of the multi-process tests, started by `accel launch` (or by hand).
 * argv[1] picks the mode (default: check); the program checks its own results exactly and exits 0
 * when they are right, non-zero (with a message on stderr) when not. An unknown mode prints the
 * known ones and exits with code 64. Every mode is one function in the table `kModes` below.
 *
 *   check      every collective, every dtype, results compared exactly
 *   die        rank 1 exits with code 3 in the middle of a series of all-reduces
 *   quit       the same, but rank 1 exits with code 0 (the others must still fail, not hang)
 *   mismatch   gather with rank-dependent shapes must fail on every rank with ACCEL_ERR_SHAPE
 *   census     the last rank never starts: the others must fail naming it
 *   lone       this rank alone: accel_init must fail with ACCEL_ERR_RENDEZVOUS; prints how long
 *              the call took ("accel_init failed after S s: message"), the process start excluded
 *   timeout    rank 1 stays away from a collective: rank 0 must get ACCEL_ERR_TIMEOUT
 *   config     rank 0 prints the effective configuration
 *   metrics N B [split]  gather_for_metrics over a dataset of N: every sample exactly once
 *   order B    rank 0 prints the samples of every global step of two shuffled epochs
 *   equiv B [K]  train an MLP 20 optimizer steps (batch B per process) on fixed data; check
 *              parameters are bitwise equal on every rank; rank 0 prints them. Accumulation comes
 *              from the launcher (--gradient_accumulation_steps); K is accepted and ignored
 *   unused B   a parameter used on one rank only, another used by none: no hang, right gradients
 *   schedcount  3 optimizer steps with a step schedule (gamma 0.5): rank 0 prints the rate
 *   savemodel DIR  every rank calls save_model; only rank 0 writes; all see the file after it
 *   resume save|load DIR K TOTAL [rng|data|optimizer|scheduler]  train steps 0..TOTAL, saving
 *              the state in DIR at step K (save), or load it and go on from K (load), optionally
 *              dropping one part of the loaded state; rank 0 prints every step's loss and samples
 *              and a hash of the final parameters
 *   crashloop DIR N  save_state into DIR N times (killed from outside, for atomic saves)
 *   checkload DIR  load_state from DIR: prints "loaded", or "refused: ..." and exits 3
 *   noprepare  backward with no prepared model on 2 processes must be a clear error
 *   batchnorm  train a conv + batch-norm model on rank-dependent data; buffers agree on every rank
 *   sleep      every rank sleeps (for signal tests)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"

static int g_rank = -1;

#define CHECK(call)                                                                          \
  do {                                                                                       \
    accel_status st_ = (call);                                                               \
    if (st_ != ACCEL_OK) {                                                                   \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, accel_status_name(st_), \
              accel_last_error_message());                                                   \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define EXPECT(cond, ...)                                            \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "rank %d: check failed: %s: ", g_rank, #cond); \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, "\n");                                         \
      exit(2);                                                       \
    }                                                                \
  } while (0)

static accel_tensor* make(const void* data, accel_dtype dt, const int64_t* shape, size_t ndim) {
  size_t n = accel_dtype_size(dt), i;
  accel_tensor* t = NULL;
  for (i = 0; i < ndim; ++i) n *= (size_t)shape[i];
  CHECK(accel_tensor_from_data(data, n, dt, shape, ndim, &t));
  return t;
}

/* The size output of the buffer convention, where the program knows the size already. */
static size_t g_size;

/* Calls a method that returns one tensor; the caller frees it. */
static accel_tensor* call_one(accel_model* model, const char* method,
                              const accel_tensor* const* inputs, size_t count) {
  accel_tensor_list* outputs = NULL;
  accel_tensor* result = NULL;
  CHECK(accel_model_call(model, method, inputs, count, &outputs));
  CHECK(accel_tensor_list_get(outputs, 0, &result));
  accel_tensor_list_free(outputs);
  return result;
}

static void expect_shape(const accel_tensor* t, const int64_t* shape, size_t ndim) {
  int64_t got[ACCEL_MAX_DIMS];
  size_t nd = 0, i;
  CHECK(accel_tensor_dim_count(t, &nd));
  EXPECT(nd == ndim, "ndim %zu, expected %zu", nd, ndim);
  CHECK(accel_tensor_shape(t, got, ACCEL_MAX_DIMS, &nd));
  for (i = 0; i < ndim; ++i) EXPECT(got[i] == shape[i], "dim %zu is %lld", i, (long long)got[i]);
}

static void check_gather(accel_accelerator* acc, int world) {
  /* f32 [2, 3]: rank r holds r*100 + i. Gathered: [2*world, 3] in rank order. */
  float mine[6], *all;
  int64_t shape[2] = {2, 3}, want[2];
  accel_tensor *t, *out;
  int i, r;
  for (i = 0; i < 6; ++i) mine[i] = (float)(g_rank * 100 + i);
  t = make(mine, ACCEL_DTYPE_F32, shape, 2);
  CHECK(accel_gather(acc, t, &out));
  want[0] = 2 * world;
  want[1] = 3;
  expect_shape(out, want, 2);
  all = malloc(sizeof(float) * 6 * (size_t)world);
  CHECK(accel_tensor_to_data(out, all, sizeof(float) * 6 * (size_t)world, &g_size));
  for (r = 0; r < world; ++r)
    for (i = 0; i < 6; ++i)
      EXPECT(all[r * 6 + i] == (float)(r * 100 + i), "gather f32 [%d] = %g", r * 6 + i,
             all[r * 6 + i]);
  free(all);
  accel_tensor_free(out);
  accel_tensor_free(t);

  {
    /* int64 scalars gather to a vector; bf16 and bool move bit-exactly. */
    int64_t v = 1000000000000LL + g_rank, got[16];
    uint16_t bf[2];
    uint16_t bf_all[32];
    uint8_t flag = (uint8_t)(g_rank % 2), flags[16];
    int64_t two[1] = {2}, one[1] = {1};
    t = make(&v, ACCEL_DTYPE_I64, NULL, 0);
    CHECK(accel_gather(acc, t, &out));
    want[0] = world;
    expect_shape(out, want, 1);
    CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
    for (r = 0; r < world; ++r) EXPECT(got[r] == 1000000000000LL + r, "gather i64 [%d]", r);
    accel_tensor_free(out);
    accel_tensor_free(t);

    bf[0] = (uint16_t)(0x3f80 + g_rank); /* distinct bf16 bit patterns */
    bf[1] = 0xc000;
    t = make(bf, ACCEL_DTYPE_BF16, two, 1);
    CHECK(accel_gather(acc, t, &out));
    CHECK(accel_tensor_to_data(out, bf_all, sizeof bf_all, &g_size));
    for (r = 0; r < world; ++r)
      EXPECT(bf_all[2 * r] == 0x3f80 + r && bf_all[2 * r + 1] == 0xc000, "gather bf16 [%d]", r);
    accel_tensor_free(out);
    accel_tensor_free(t);

    t = make(&flag, ACCEL_DTYPE_BOOL, one, 1);
    CHECK(accel_gather(acc, t, &out));
    CHECK(accel_tensor_to_data(out, flags, sizeof flags, &g_size));
    for (r = 0; r < world; ++r) EXPECT(flags[r] == r % 2, "gather bool [%d]", r);
    accel_tensor_free(out);
    accel_tensor_free(t);
  }
}

static void check_pad(accel_accelerator* acc, int world) {
  /* rank r holds a [r+1, 2] int32 block of (r+1); padded along dim 0 to [world, 2]. */
  int32_t block[64], got[64];
  int64_t shape[2], want[2];
  accel_tensor *t, *out;
  int i, pad_first;
  shape[0] = g_rank + 1;
  shape[1] = 2;
  for (i = 0; i < (g_rank + 1) * 2; ++i) block[i] = g_rank + 1;
  t = make(block, ACCEL_DTYPE_I32, shape, 2);
  for (pad_first = 0; pad_first <= 1; ++pad_first) {
    CHECK(accel_pad_across_processes(acc, t, 0, -7.0, pad_first != 0, &out));
    want[0] = world;
    want[1] = 2;
    expect_shape(out, want, 2);
    CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
    for (i = 0; i < world * 2; ++i) {
      int row = i / 2, filled;
      filled = pad_first ? row >= world - (g_rank + 1) : row < g_rank + 1;
      EXPECT(got[i] == (filled ? g_rank + 1 : -7), "pad_first=%d [%d] = %d", pad_first, i, got[i]);
    }
    accel_tensor_free(out);
  }
  /* Padding the other dimension: [r+1, 2] along dim 1 leaves it at 2 everywhere. */
  CHECK(accel_pad_across_processes(acc, t, -1, 0.0, false, &out));
  expect_shape(out, shape, 2);
  accel_tensor_free(out);
  accel_tensor_free(t);
}

static void check_reduce(accel_accelerator* acc, int world) {
  float v[2];
  int64_t shape[1] = {2};
  int64_t iv[2], igot[2];
  float got[2];
  accel_tensor *t, *ti, *out;
  float sum = 0;
  int r;
  v[0] = (float)(g_rank + 1);
  v[1] = (float)(-g_rank);
  for (r = 0; r < world; ++r) sum += (float)(r + 1);
  t = make(v, ACCEL_DTYPE_F32, shape, 1);
  CHECK(accel_reduce(acc, t, ACCEL_REDUCE_SUM, &out));
  CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
  EXPECT(got[0] == sum, "sum %g, expected %g", got[0], sum);
  accel_tensor_free(out);
  CHECK(accel_reduce(acc, t, ACCEL_REDUCE_MEAN, &out));
  CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
  EXPECT(got[0] == sum / (float)world, "mean %g", got[0]);
  accel_tensor_free(out);
  CHECK(accel_reduce(acc, t, ACCEL_REDUCE_MAX, &out));
  CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
  EXPECT(got[0] == (float)world && got[1] == 0.0f, "max %g %g", got[0], got[1]);
  accel_tensor_free(out);
  CHECK(accel_reduce(acc, t, ACCEL_REDUCE_MIN, &out));
  CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
  EXPECT(got[0] == 1.0f && got[1] == (float)(1 - world), "min %g %g", got[0], got[1]);
  accel_tensor_free(out);
  accel_tensor_free(t);

  iv[0] = 1LL << 40;
  iv[1] = g_rank;
  ti = make(iv, ACCEL_DTYPE_I64, shape, 1);
  CHECK(accel_reduce(acc, ti, ACCEL_REDUCE_SUM, &out));
  CHECK(accel_tensor_to_data(out, igot, sizeof igot, &g_size));
  EXPECT(igot[0] == (int64_t)world << 40, "int64 sum exact");
  EXPECT(igot[1] == (int64_t)world * (world - 1) / 2, "int64 sum of ranks %lld",
         (long long)igot[1]);
  accel_tensor_free(out);
  accel_tensor_free(ti);
}

static void check_broadcast(accel_accelerator* acc, int world) {
  int root;
  for (root = 0; root < world; ++root) {
    /* The root's tensor has a root-dependent shape; receivers pass nothing and learn it. */
    double data[8], got[8];
    int64_t shape[1];
    accel_tensor *t = NULL, *out;
    accel_dtype dt;
    int i;
    shape[0] = root + 1;
    for (i = 0; i <= root; ++i) data[i] = root * 10.0 + i + 0.25;
    if (g_rank == root) t = make(data, ACCEL_DTYPE_F64, shape, 1);
    CHECK(accel_broadcast(acc, t, root, &out));
    expect_shape(out, shape, 1);
    CHECK(accel_tensor_dtype(out, &dt));
    EXPECT(dt == ACCEL_DTYPE_F64, "dtype %d", (int)dt);
    CHECK(accel_tensor_to_data(out, got, sizeof got, &g_size));
    for (i = 0; i <= root; ++i) EXPECT(got[i] == root * 10.0 + i + 0.25, "broadcast[%d]", i);
    accel_tensor_free(out);
    accel_tensor_free(t);
  }
}

static void check_gather_object(accel_accelerator* acc, int world) {
  /* Rank r sends r copies of the letter 'a'+r: rank 0 sends nothing at all. */
  char mine[32];
  accel_bytes_list* list;
  size_t count = 0, i;
  int r;
  memset(mine, 'a' + g_rank, sizeof mine);
  CHECK(accel_gather_object(acc, g_rank ? mine : NULL, (size_t)g_rank, &list));
  CHECK(accel_bytes_list_count(list, &count));
  EXPECT(count == (size_t)world, "count %zu", count);
  for (r = 0; r < world; ++r) {
    const void* data;
    size_t size;
    CHECK(accel_bytes_list_get(list, (size_t)r, &data, &size));
    EXPECT(size == (size_t)r, "object %d has %zu bytes", r, size);
    for (i = 0; i < size; ++i) EXPECT(((const char*)data)[i] == 'a' + r, "object %d byte", r);
  }
  accel_bytes_list_free(list);
}

static void check_main_process_first(accel_accelerator* acc, int world) {
  /* The main process writes a file inside the block; the others must find it when they enter. */
  char path[256];
  FILE* f;
  const char* dir = getenv("MP_TEST_DIR");
  snprintf(path, sizeof path, "%s/main_first.%s", dir ? dir : "/tmp", getenv("ACCEL_RUN_ID"));
  CHECK(accel_main_process_first_begin(acc));
  if (g_rank == 0) {
    usleep(300000);
    f = fopen(path, "w");
    EXPECT(f != NULL, "cannot write %s", path);
    fputs("done", f);
    fclose(f);
  } else {
    f = fopen(path, "r");
    EXPECT(f != NULL, "rank %d entered before the main process finished", g_rank);
    fclose(f);
  }
  CHECK(accel_main_process_first_end(acc));
  CHECK(accel_wait_for_everyone(acc));
  if (g_rank == 0) remove(path);
  (void)world;
}

/* Every rank's copy of every parameter must be bitwise equal; rank 0 prints them. */
static void check_params_agree(accel_accelerator* acc, accel_model* model, int print) {
  size_t count = 0, i;
  CHECK(accel_model_tensor_count(model, &count));
  for (i = 0; i < count; ++i) {
    char name[128];
    size_t len = 0, bytes = 0, total = 0;
    accel_tensor *t, *all;
    int64_t n = 0, k, r, world;
    accel_dtype dt;
    unsigned char* v;
    CHECK(accel_model_tensor_name(model, i, name, sizeof name, &len));
    CHECK(accel_model_tensor(model, name, &t));
    CHECK(accel_tensor_element_count(t, &n));
    CHECK(accel_tensor_data_size(t, &bytes));
    CHECK(accel_tensor_dtype(t, &dt));
    CHECK(accel_gather(acc, t, &all));
    CHECK(accel_tensor_data_size(all, &total));
    world = (int64_t)(total / bytes);
    v = malloc(total);
    CHECK(accel_tensor_to_data(all, v, total, &g_size));
    for (r = 1; r < world; ++r)
      EXPECT(memcmp(v, v + r * (int64_t)bytes, bytes) == 0, "%s differs on rank %lld", name,
             (long long)r);
    if (print && g_rank == 0 && dt == ACCEL_DTYPE_F32) {
      printf("param %s", name);
      for (k = 0; k < n; ++k) printf(" %.9g", ((const float*)v)[k]);
      printf("\n");
    }
    free(v);
    accel_tensor_free(all);
    accel_tensor_free(t);
  }
}

static uint64_t fnv(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = data;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* One run of the program: its mode, its accelerator (NULL in the modes that make their own),
 * the world size and the arguments. */
struct run {
  const char* mode;
  accel_accelerator* acc;
  int world;
  int argc;
  char** argv;
};

/* A mode's result that means: wait for everyone, free the accelerator, exit 0. Any other result
 * is the exit code (after the accelerator is freed). */
enum { kSync = -1 };

/* What `resume` trains: a shuffled loader over 120 samples, an MLP with dropout, AdamW and a
 * linear schedule, all prepared together; fresh_* replace the loaded ones when a part is
 * skipped. */
struct resume_run {
  accel_tensor *tx, *ty, *tid;
  accel_dataset* ds;
  accel_dataloader* dl;
  accel_model* model;
  accel_optimizer *opt, *fresh_opt;
  accel_scheduler *sched, *fresh_sched;
};

static void resume_setup(accel_accelerator* acc, struct resume_run* r) {
  const int64_t n = 120;
  float x[120 * 6];
  int64_t y[120], ids[120], shape[2] = {120, 6}, i;
  const accel_tensor* fields[3];
  void* objects[4];
  for (i = 0; i < n * 6; ++i) x[i] = (float)((i * 37) % 23) / 23.0f - 0.5f;
  for (i = 0; i < n; ++i) {
    y[i] = i % 3;
    ids[i] = i;
  }
  r->tx = make(x, ACCEL_DTYPE_F32, shape, 2);
  r->ty = make(y, ACCEL_DTYPE_I64, shape, 1);
  r->tid = make(ids, ACCEL_DTYPE_I64, shape, 1);
  fields[0] = r->tx;
  fields[1] = r->ty;
  fields[2] = r->tid;
  CHECK(accel_dataset_from_tensors(fields, 3, &r->ds));
  CHECK(accel_dataloader_new(acc, r->ds, &r->dl));
  CHECK(accel_dataloader_set(r->dl, "batch_size", "4"));
  CHECK(accel_dataloader_set(r->dl, "shuffle", "true"));
  CHECK(accel_dataloader_set(r->dl, "seed", "3"));
  CHECK(accel_set_seed(acc, 5, false));
  CHECK(accel_model_new(&r->model));
  CHECK(accel_model_add_layer(r->model, "fc1", "linear", "in_features=6 out_features=16"));
  CHECK(accel_model_add_layer(r->model, "fc2", "linear", "in_features=16 out_features=3"));
  CHECK(accel_model_define(
      r->model,
      "def training_step(self, x, y):\n"
      "    h = torch.dropout(torch.relu(self.fc1.forward(x)), 0.3, self.training)\n"
      "    return torch.cross_entropy_loss(self.fc2.forward(h), y)\n"));
  CHECK(accel_optimizer_new(r->model, "adamw", &r->opt));
  CHECK(accel_optimizer_set(r->opt, "lr", "0.01"));
  CHECK(accel_scheduler_new(r->opt, "linear", &r->sched));
  CHECK(accel_scheduler_set(r->sched, "warmup_steps", "3"));
  CHECK(accel_scheduler_set(r->sched, "total_steps", "200"));
  objects[0] = r->model;
  objects[1] = r->opt;
  objects[2] = r->sched;
  objects[3] = r->dl;
  CHECK(accel_prepare(acc, objects, 4));
}

/* Loads the state of DIR, then drops the part `skip` names ("" for none). */
static void resume_load(accel_accelerator* acc, struct resume_run* r, const char* dir,
                        const char* skip) {
  CHECK(accel_load_state(acc, dir));
  if (!strcmp(skip, "rng")) CHECK(accel_set_seed(acc, 777, false));
  if (!strcmp(skip, "data")) CHECK(accel_dataloader_set_position(r->dl, 0, 0));
  if (!strcmp(skip, "optimizer")) {
    void* o[1];
    CHECK(accel_optimizer_new(r->model, "adamw", &r->fresh_opt));
    CHECK(accel_optimizer_set(r->fresh_opt, "lr", "0.01"));
    o[0] = r->fresh_opt;
    CHECK(accel_prepare(acc, o, 1));
  }
  if (!strcmp(skip, "scheduler")) {
    CHECK(accel_scheduler_new(r->opt, "linear", &r->fresh_sched));
    CHECK(accel_scheduler_set(r->fresh_sched, "warmup_steps", "3"));
    CHECK(accel_scheduler_set(r->fresh_sched, "total_steps", "200"));
  }
}

/* One training step; rank 0 prints its loss and the samples it used. */
static void resume_step(accel_accelerator* acc, struct resume_run* r, int step) {
  accel_optimizer* opt = r->fresh_opt ? r->fresh_opt : r->opt;
  accel_tensor *f[3], *loss, *g;
  size_t fields = 0;
  double value = 0;
  int64_t used[64], m = 0, j;
  CHECK(accel_dataloader_next(r->dl, f, 3, &fields));
  if (fields == 0) CHECK(accel_dataloader_next(r->dl, f, 3, &fields)); /* the next epoch */
  CHECK(accel_accumulate(acc));
  loss = call_one(r->model, "training_step", (const accel_tensor* const*)f, 2);
  CHECK(accel_backward(acc, loss));
  CHECK(accel_optimizer_step(opt));
  CHECK(accel_scheduler_step(r->fresh_sched ? r->fresh_sched : r->sched));
  CHECK(accel_optimizer_zero_grad(opt));
  CHECK(accel_gather_for_metrics(acc, f[2], &g));
  CHECK(accel_tensor_element_count(g, &m));
  CHECK(accel_tensor_to_data(g, used, sizeof used, &g_size));
  CHECK(accel_tensor_item_f64(loss, &value));
  if (g_rank == 0) {
    printf("step %d loss %a ids", step, value);
    for (j = 0; j < m; ++j) printf(" %lld", (long long)used[j]);
    printf("\n");
  }
  accel_tensor_free(g);
  accel_tensor_free(loss);
  accel_tensor_free(f[0]);
  accel_tensor_free(f[1]);
  accel_tensor_free(f[2]);
}

/* The parameters as save_model writes them into DIR.final (every rank calls it: under ZeRO stage
 * 3 it gathers them), hashed by rank 0. */
static void resume_print_hash(accel_accelerator* acc, accel_model* model, const char* dir) {
  char final_dir[512], file[600];
  snprintf(final_dir, sizeof final_dir, "%s.final", dir);
  CHECK(accel_save_model(acc, model, final_dir, NULL));
  if (g_rank == 0) {
    uint64_t h = 1469598103934665603ULL;
    unsigned char buf[4096];
    size_t got;
    FILE* f;
    snprintf(file, sizeof file, "%s/model.safetensors", final_dir);
    f = fopen(file, "rb");
    EXPECT(f != NULL, "cannot open %s", file);
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = fnv(buf, got, h);
    fclose(f);
    printf("params %016llx\n", (unsigned long long)h);
  }
}

static int mode_resume(struct run* run) {
  const int save = strcmp(run->argv[2], "save") == 0;
  const char* dir = run->argv[3];
  const int k = atoi(run->argv[4]), total = atoi(run->argv[5]);
  const char* skip = run->argc > 6 ? run->argv[6] : "";
  struct resume_run r;
  int step;
  memset(&r, 0, sizeof r);
  resume_setup(run->acc, &r);
  if (!save) resume_load(run->acc, &r, dir, skip);
  for (step = save ? 0 : k; step < total; ++step) {
    if (save && step == k) CHECK(accel_save_state(run->acc, dir));
    resume_step(run->acc, &r, step);
  }
  resume_print_hash(run->acc, r.model, dir);
  accel_scheduler_free(r.fresh_sched);
  accel_optimizer_free(r.fresh_opt);
  accel_scheduler_free(r.sched);
  accel_optimizer_free(r.opt);
  accel_model_free(r.model);
  accel_dataloader_free(r.dl);
  accel_dataset_free(r.ds);
  accel_tensor_free(r.tx);
  accel_tensor_free(r.ty);
  accel_tensor_free(r.tid);
  return kSync;
}

/* The weights of "side" and "never" in `unused`: over a megabyte each. */
enum { kUnusedWeights = 16384 * 20 };

/* What `equiv` and `unused` train: fixed data (1280 samples, or 64 for `unused`, 20 features,
 * 4 classes) in batches of B per process, an MLP, SGD, all prepared together. */
struct train_run {
  int unused;
  accel_tensor *tx, *ty;
  accel_dataset* ds;
  accel_dataloader* dl;
  accel_model* model;
  accel_optimizer* opt;
};

static void train_data(accel_accelerator* acc, struct train_run* r, int batch) {
  const int64_t n = r->unused ? 64 : 1280;
  int64_t shape[2], i, j;
  float* x = malloc((size_t)n * 20 * sizeof(float));
  int64_t* y = malloc((size_t)n * sizeof(int64_t));
  const accel_tensor* fields[2];
  char text[32];
  for (i = 0; i < n; ++i) {
    for (j = 0; j < 20; ++j) x[i * 20 + j] = (float)((i * 7 + j * 13) % 17) / 17.0f - 0.5f;
    y[i] = (i * 3) % 4;
  }
  shape[0] = n;
  shape[1] = 20;
  r->tx = make(x, ACCEL_DTYPE_F32, shape, 2);
  r->ty = make(y, ACCEL_DTYPE_I64, shape, 1);
  fields[0] = r->tx;
  fields[1] = r->ty;
  CHECK(accel_dataset_from_tensors(fields, 2, &r->ds));
  CHECK(accel_dataloader_new(acc, r->ds, &r->dl));
  snprintf(text, sizeof text, "%d", batch);
  CHECK(accel_dataloader_set(r->dl, "batch_size", text));
  free(x);
  free(y);
}

static void train_model(accel_accelerator* acc, struct train_run* r) {
  void* objects[3];
  CHECK(accel_set_seed(acc, 7, false));
  CHECK(accel_model_new(&r->model));
  CHECK(accel_model_add_layer(r->model, "fc1", "linear", "in_features=20 out_features=32"));
  CHECK(accel_model_add_layer(r->model, "fc2", "linear", "in_features=32 out_features=4"));
  if (r->unused) {
    /* "side" is used by rank 1 only; "never" by no rank. Their weights are over a megabyte
     * (kUnusedWeights floats): stage 2 reduces such a gradient in place, in a bucket of its
     * own, and learns who used it at the end of the backward. */
    CHECK(accel_model_add_layer(r->model, "side", "linear", "in_features=20 out_features=16384"));
    CHECK(accel_model_add_layer(r->model, "never", "linear", "in_features=20 out_features=16384"));
    CHECK(accel_model_define(r->model,
                             "def training_step(self, x, y, use_side):\n"
                             "    out = self.fc2.forward(torch.relu(self.fc1.forward(x)))\n"
                             "    if bool(use_side):\n"
                             "        out = out + self.side.forward(x).narrow(1, 0, 4)\n"
                             "    return torch.cross_entropy_loss(out, y)\n"));
  } else {
    CHECK(accel_model_define(r->model,
                             "def training_step(self, x, y):\n"
                             "    out = self.fc2.forward(torch.relu(self.fc1.forward(x)))\n"
                             "    return torch.cross_entropy_loss(out, y)\n"));
  }
  CHECK(accel_optimizer_new(r->model, "sgd", &r->opt));
  CHECK(accel_optimizer_set(r->opt, "lr", "0.05"));
  objects[0] = r->model;
  objects[1] = r->opt;
  objects[2] = r->dl;
  CHECK(accel_prepare(acc, objects, 3));
}

/* One epoch; returns the number of optimizer steps that synchronized. */
static int train_epoch(accel_accelerator* acc, struct train_run* r) {
  int steps = 0;
  for (;;) {
    accel_tensor *f[2], *loss;
    bool sync = false;
    size_t fields = 0;
    CHECK(accel_dataloader_next(r->dl, f, 2, &fields));
    if (fields == 0) break;
    CHECK(accel_accumulate(acc));
    if (r->unused) {
      /* The flag travels as a one-element tensor; the source turns it into a bool. */
      uint8_t flag = (uint8_t)(g_rank == 1);
      accel_tensor* use_side = make(&flag, ACCEL_DTYPE_BOOL, NULL, 0);
      const accel_tensor* in[3];
      in[0] = f[0];
      in[1] = f[1];
      in[2] = use_side;
      loss = call_one(r->model, "training_step", in, 3);
      accel_tensor_free(use_side);
    } else {
      loss = call_one(r->model, "training_step", (const accel_tensor* const*)f, 2);
    }
    CHECK(accel_backward(acc, loss));
    CHECK(accel_sync_gradients(acc, &sync));
    CHECK(accel_optimizer_step(r->opt));
    CHECK(accel_optimizer_zero_grad(r->opt));
    steps += sync;
    accel_tensor_free(loss);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
  }
  return steps;
}

/* Copies the kUnusedWeights floats of the model's tensor `name` into `out`. */
static void copy_weights(accel_model* model, const char* name, float* out) {
  accel_tensor* w;
  CHECK(accel_model_tensor(model, name, &w));
  CHECK(accel_tensor_to_data(w, out, sizeof(float) * kUnusedWeights, &g_size));
  accel_tensor_free(w);
}

/* equiv B [K] and unused B. */
static int mode_train(struct run* run) {
  struct train_run r;
  const size_t bytes = sizeof(float) * kUnusedWeights;
  float *never_before = NULL, *side_before = NULL;
  int steps;
  memset(&r, 0, sizeof r);
  r.unused = strcmp(run->mode, "unused") == 0;
  /* argv[3] (K) is accepted and ignored: accumulation comes from the launcher. */
  train_data(run->acc, &r, run->argc > 2 ? atoi(run->argv[2]) : 8);
  train_model(run->acc, &r);
  if (r.unused) {
    never_before = malloc(bytes);
    side_before = malloc(bytes);
    copy_weights(r.model, "never.weight", never_before);
    copy_weights(r.model, "side.weight", side_before);
  }
  steps = train_epoch(run->acc, &r);
  EXPECT(r.unused || steps == 20, "%d optimizer steps, expected 20", steps);
  check_params_agree(run->acc, r.model, !r.unused);
  if (r.unused) {
    /* "never" kept its initial weights on every rank; "side" moved everywhere (rank 1 used it,
     * and the averaged gradient reached rank 0 too). */
    float* now = malloc(bytes);
    copy_weights(r.model, "never.weight", now);
    EXPECT(memcmp(now, never_before, bytes) == 0, "a parameter no rank used changed");
    copy_weights(r.model, "side.weight", now);
    EXPECT(memcmp(now, side_before, bytes) != 0, "a parameter rank 1 used did not change");
    free(now);
    printf("rank %d: unused parameters handled\n", g_rank);
  }
  accel_optimizer_free(r.opt);
  accel_model_free(r.model);
  accel_dataloader_free(r.dl);
  accel_dataset_free(r.ds);
  accel_tensor_free(r.tx);
  accel_tensor_free(r.ty);
  free(never_before);
  free(side_before);
  return kSync;
}

/* lone: makes its own accelerator, which must fail. */
static int mode_lone(struct run* run) {
  struct timespec a, b;
  accel_status st;
  clock_gettime(CLOCK_MONOTONIC, &a);
  st = accel_init(NULL, &run->acc);
  clock_gettime(CLOCK_MONOTONIC, &b);
  EXPECT(st == ACCEL_ERR_RENDEZVOUS, "status %s", accel_status_name(st));
  printf("accel_init failed after %.3f s: %s\n",
         (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9,
         accel_last_error_message());
  return 0;
}

/* census: makes its own accelerator, which must fail naming the missing last rank. */
static int mode_census(struct run* run) {
  const char* world_env = getenv("WORLD_SIZE");
  accel_status st;
  int last = world_env ? atoi(world_env) - 1 : 0;
  char expect_text[64];
  if (g_rank == last) return 0; /* this rank "never starts" */
  st = accel_init(NULL, &run->acc);
  snprintf(expect_text, sizeof expect_text, "missing rank %d", last);
  EXPECT(st == ACCEL_ERR_RENDEZVOUS, "status %s: %s", accel_status_name(st),
         accel_last_error_message());
  EXPECT(strstr(accel_last_error_message(), expect_text) != NULL, "message: %s",
         accel_last_error_message());
  printf("rank %d: %s\n", g_rank, accel_last_error_message());
  return 0;
}

/* sleep: makes its own accelerator and sleeps a minute (signal tests kill it). */
static int mode_sleep(struct run* run) {
  CHECK(accel_init(NULL, &run->acc));
  printf("rank %d sleeping\n", g_rank);
  fflush(stdout);
  sleep(60);
  return 0;
}

static int mode_check(struct run* run) {
  accel_accelerator* acc = run->acc;
  const int world = run->world;
  accel_distribution dist;
  CHECK(accel_distributed_type(acc, &dist));
  EXPECT(dist == (world > 1 ? ACCEL_DISTRIBUTED_MULTI_CPU : ACCEL_DISTRIBUTED_NO), "dist %d",
         (int)dist);
  check_gather(acc, world);
  check_pad(acc, world);
  check_reduce(acc, world);
  check_broadcast(acc, world);
  check_gather_object(acc, world);
  check_main_process_first(acc, world);
  printf("rank %d of %d: all collectives OK\n", g_rank, world);
  return kSync;
}

/* die and quit: rank 1 leaves at step 3 with code 3 (die) or 0 (quit); the others must fail. */
static int mode_die(struct run* run) {
  const int code = strcmp(run->mode, "die") == 0 ? 3 : 0;
  float v = 1;
  accel_tensor* t = make(&v, ACCEL_DTYPE_F32, NULL, 0);
  int step;
  for (step = 0; step < 1000; ++step) {
    accel_tensor* out = NULL;
    accel_status st;
    if (g_rank == 1 && step == 3) {
      fprintf(stderr, "rank 1: exiting on purpose at step 3\n");
      /* Exits mid-job as a crashing rank would, with its accelerator still in the group, but
       * frees its own tensor (LeakSanitizer watches). */
      accel_tensor_free(t);
      exit(code);
    }
    st = accel_reduce(run->acc, t, ACCEL_REDUCE_SUM, &out);
    if (st != ACCEL_OK) {
      fprintf(stderr, "rank %d: step %d: %s: %s\n", g_rank, step, accel_status_name(st),
              accel_last_error_message());
      accel_tensor_free(t);
      exit(st == ACCEL_ERR_PEER_FAILED || st == ACCEL_ERR_TIMEOUT ? 4 : 5);
    }
    accel_tensor_free(out);
  }
  fprintf(stderr, "rank %d: the peer's death went unnoticed\n", g_rank);
  exit(6); /* with the accelerator left as it is, as a failing rank would */
}

static int mode_mismatch(struct run* run) {
  float v[4] = {0, 1, 2, 3};
  int64_t shape[1];
  accel_tensor *t, *out = NULL;
  accel_status st;
  shape[0] = g_rank + 1;
  t = make(v, ACCEL_DTYPE_F32, shape, 1);
  st = accel_gather(run->acc, t, &out);
  EXPECT(st == ACCEL_ERR_SHAPE, "status %s", accel_status_name(st));
  EXPECT(out == NULL, "output set on failure");
  EXPECT(strstr(accel_last_error_message(), "pad_across_processes") != NULL, "message: %s",
         accel_last_error_message());
  EXPECT(strstr(accel_last_error_message(), "rank 1 [2]") != NULL, "message: %s",
         accel_last_error_message());
  printf("rank %d: %s\n", g_rank, accel_last_error_message());
  /* The group is still usable: pad, then gather. */
  {
    accel_tensor* padded;
    CHECK(accel_pad_across_processes(run->acc, t, 0, 0.0, false, &padded));
    CHECK(accel_gather(run->acc, padded, &out));
    accel_tensor_free(out);
    accel_tensor_free(padded);
  }
  accel_tensor_free(t);
  return kSync;
}

/* timeout: the accelerator has a collective timeout of 2 s (the table says so). */
static int mode_timeout(struct run* run) {
  if (g_rank == 1) {
    sleep(6); /* stays away from the collective */
  } else {
    accel_status st = accel_wait_for_everyone(run->acc);
    EXPECT(st == ACCEL_ERR_TIMEOUT, "status %s: %s", accel_status_name(st),
           accel_last_error_message());
    printf("rank %d: %s\n", g_rank, accel_last_error_message());
    st = accel_wait_for_everyone(run->acc);
    EXPECT(st == ACCEL_ERR_STATE, "after a failure: %s", accel_status_name(st));
  }
  return 0; /* no final wait: the group has failed */
}

/* metrics N B [split] and order B: every sample gathered exactly once per epoch. */
static int mode_metrics(struct run* run) {
  const int metrics = strcmp(run->mode, "metrics") == 0;
  const int64_t n = metrics ? atoll(run->argv[2]) : 200;
  const char* batch = metrics ? run->argv[3] : run->argv[2];
  const int split = metrics && run->argc > 4 && strcmp(run->argv[4], "split") == 0;
  int64_t* values = malloc(sizeof(int64_t) * (size_t)(n + 1));
  int64_t* counts = calloc((size_t)(n + 1), sizeof(int64_t));
  int64_t i, total = 0;
  accel_tensor* t;
  accel_dataset* ds;
  accel_dataloader* dl;
  int epoch;
  for (i = 0; i < n; ++i) values[i] = i;
  t = make(values, ACCEL_DTYPE_I64, &n, 1);
  CHECK(accel_dataset_from_tensors((const accel_tensor* const*)&t, 1, &ds));
  CHECK(accel_dataloader_new(run->acc, ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", batch));
  CHECK(accel_dataloader_set(dl, "shuffle", "true"));
  CHECK(accel_dataloader_set(dl, "seed", "11"));
  CHECK(accel_dataloader_set(dl, "num_workers", "1"));
  if (split) CHECK(accel_dataloader_set(dl, "split_batches", "true"));
  for (epoch = 0; epoch < (metrics ? 1 : 2); ++epoch) {
    int step = 0;
    for (;;) {
      accel_tensor *f[1], *g;
      size_t fields = 0;
      int64_t got[4096], m = 0;
      CHECK(accel_dataloader_next(dl, f, 1, &fields));
      if (fields == 0) break;
      CHECK(accel_gather_for_metrics(run->acc, f[0], &g));
      CHECK(accel_tensor_element_count(g, &m));
      CHECK(accel_tensor_to_data(g, got, sizeof got, &g_size));
      if (g_rank == 0 && !metrics) {
        printf("epoch %d step %d:", epoch, step);
        for (i = 0; i < m; ++i) printf(" %lld", (long long)got[i]);
        printf("\n");
      }
      for (i = 0; i < m; ++i) ++counts[got[i]];
      total += m;
      accel_tensor_free(f[0]);
      accel_tensor_free(g);
      ++step;
    }
  }
  for (i = 0; i < n; ++i)
    EXPECT(counts[i] == (metrics ? 1 : 2), "sample %lld counted %lld times", (long long)i,
           (long long)counts[i]);
  if (g_rank == 0 && metrics)
    printf("metrics n=%lld batch=%s%s: %lld samples, each once\n", (long long)n, batch,
           split ? " split" : "", (long long)total);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  accel_tensor_free(t);
  free(values);
  free(counts);
  return kSync;
}

static int mode_savemodel(struct run* run) {
  accel_model* model;
  char path[512];
  FILE* f;
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "fc", "linear", "in_features=8 out_features=8"));
  CHECK(accel_save_model(run->acc, model, run->argv[2], "100")); /* 100 bytes: a shard a tensor */
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", run->argv[2]);
  f = fopen(path, "r");
  EXPECT(f != NULL, "rank %d does not see %s after save_model returned", g_rank, path);
  fclose(f);
  printf("rank %d: saved model visible\n", g_rank);
  accel_model_free(model);
  return kSync;
}

/* crashloop DIR N and checkload DIR. */
static int mode_crashloop(struct run* run) {
  accel_model* model;
  accel_optimizer* opt;
  void* objects[2];
  int i;
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "fc", "linear", "in_features=512 out_features=512"));
  CHECK(accel_optimizer_new(model, "adamw", &opt));
  objects[0] = model;
  objects[1] = opt;
  CHECK(accel_prepare(run->acc, objects, 2));
  if (strcmp(run->mode, "checkload") == 0) {
    accel_status st = accel_load_state(run->acc, run->argv[2]);
    if (st != ACCEL_OK) {
      printf("refused: %s: %s\n", accel_status_name(st), accel_last_error_message());
      accel_optimizer_free(opt);
      accel_model_free(model);
      return 3;
    }
    printf("loaded\n");
  } else {
    for (i = 0; i < atoi(run->argv[3]); ++i) {
      CHECK(accel_save_state(run->acc, run->argv[2]));
      printf("saved %d\n", i);
      fflush(stdout);
    }
  }
  accel_optimizer_free(opt);
  accel_model_free(model);
  return kSync;
}

static int mode_noprepare(struct run* run) {
  accel_model* model;
  accel_tensor *t, *loss;
  float x[2] = {1, 2};
  int64_t shape[2] = {1, 2};
  accel_status st;
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "fc", "linear", "in_features=2 out_features=1"));
  CHECK(accel_model_define(model, "def loss(self, x):\n    return self.fc.forward(x).sum()\n"));
  t = make(x, ACCEL_DTYPE_F32, shape, 2);
  loss = call_one(model, "loss", (const accel_tensor* const*)&t, 1);
  st = accel_backward(run->acc, loss);
  EXPECT(st == ACCEL_ERR_STATE, "status %s", accel_status_name(st));
  printf("rank %d: %s\n", g_rank, accel_last_error_message());
  accel_tensor_free(loss);
  accel_tensor_free(t);
  accel_model_free(model);
  return kSync;
}

static int mode_batchnorm(struct run* run) {
  accel_accelerator* acc = run->acc;
  accel_model* model;
  accel_optimizer* opt;
  void* objects[2];
  float x[2 * 3 * 4 * 4];
  int64_t shape[4] = {2, 3, 4, 4};
  int i, k;
  CHECK(accel_model_new(&model));
  CHECK(
      accel_model_add_layer(model, "conv", "conv2d", "in_channels=3 out_channels=4 kernel_size=3"));
  CHECK(accel_model_add_layer(model, "bn", "batch_norm2d", "num_features=4"));
  CHECK(
      accel_model_define(model,
                         "def forward(self, x):\n    return self.bn.forward(self.conv.forward(x))\n"
                         "def loss(self, x):\n    return self.forward(x).pow(2).mean()\n"));
  CHECK(accel_optimizer_new(model, "sgd", &opt));
  objects[0] = model;
  objects[1] = opt;
  CHECK(accel_prepare(acc, objects, 2));
  for (i = 0; i < 3; ++i) {
    accel_tensor *t, *loss;
    for (k = 0; k < 96; ++k) x[k] = (float)((k * (g_rank + 3) + i) % 11) - 5.0f; /* per rank */
    t = make(x, ACCEL_DTYPE_F32, shape, 4);
    CHECK(accel_accumulate(acc));
    loss = call_one(model, "loss", (const accel_tensor* const*)&t, 1);
    CHECK(accel_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(loss);
    accel_tensor_free(t);
  }
  /* An eval forward starts from rank 0's buffers, as every forward of a prepared model. */
  {
    accel_tensor *t = make(x, ACCEL_DTYPE_F32, shape, 4), *out;
    CHECK(accel_model_train(model, false));
    out = call_one(model, "forward", (const accel_tensor* const*)&t, 1);
    accel_tensor_free(out);
    accel_tensor_free(t);
  }
  check_params_agree(acc, model, 0);
  printf("rank %d: batch-norm buffers and parameters agree\n", g_rank);
  accel_optimizer_free(opt);
  accel_model_free(model);
  return kSync;
}

static int mode_schedcount(struct run* run) {
  accel_accelerator* acc = run->acc;
  accel_model* model;
  accel_optimizer* opt;
  accel_scheduler* sched;
  void* objects[3];
  int i;
  double lr = 0;
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "fc", "linear", "in_features=2 out_features=1"));
  CHECK(accel_model_define(model, "def loss(self, x):\n    return self.fc.forward(x).sum()\n"));
  CHECK(accel_optimizer_new(model, "sgd", &opt));
  CHECK(accel_optimizer_set(opt, "lr", "1"));
  CHECK(accel_scheduler_new(opt, "step", &sched));
  CHECK(accel_scheduler_set(sched, "step_size", "1"));
  CHECK(accel_scheduler_set(sched, "gamma", "0.5"));
  objects[0] = model;
  objects[1] = opt;
  objects[2] = sched;
  CHECK(accel_prepare(acc, objects, 3));
  for (i = 0; i < 3; ++i) {
    float x[2] = {1, 2};
    int64_t shape[2] = {1, 2};
    accel_tensor *t = make(x, ACCEL_DTYPE_F32, shape, 2), *loss;
    CHECK(accel_accumulate(acc));
    loss = call_one(model, "loss", (const accel_tensor* const*)&t, 1);
    CHECK(accel_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_scheduler_step(sched));
    CHECK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(loss);
    accel_tensor_free(t);
  }
  CHECK(accel_scheduler_lr(sched, &lr));
  if (g_rank == 0) printf("lr after 3 steps: %g\n", lr);
  accel_scheduler_free(sched);
  accel_optimizer_free(opt);
  accel_model_free(model);
  return kSync;
}

static int mode_config(struct run* run) {
  size_t n = 0;
  char* text;
  accel_effective_config(run->acc, NULL, 0, &n);
  text = malloc(n);
  CHECK(accel_effective_config(run->acc, text, n, &n));
  if (g_rank == 0) fputs(text, stdout);
  free(text);
  return kSync;
}

/* How main prepares the accelerator before a mode runs. */
enum setup {
  kOwnInit,    /* none: the mode makes (or fails to make) its own */
  kInit,       /* accel_init with the default configuration */
  kInitTimeout /* accel_init with a collective timeout of 2 s */
};

struct mode {
  const char* name;
  enum setup setup;
  int (*fn)(struct run* run);
};

static const struct mode kModes[] = {
    {"check", kInit, mode_check},
    {"die", kInit, mode_die},
    {"quit", kInit, mode_die},
    {"mismatch", kInit, mode_mismatch},
    {"census", kOwnInit, mode_census},
    {"lone", kOwnInit, mode_lone},
    {"timeout", kInitTimeout, mode_timeout},
    {"config", kInit, mode_config},
    {"metrics", kInit, mode_metrics},
    {"order", kInit, mode_metrics},
    {"equiv", kInit, mode_train},
    {"unused", kInit, mode_train},
    {"schedcount", kInit, mode_schedcount},
    {"savemodel", kInit, mode_savemodel},
    {"resume", kInit, mode_resume},
    {"crashloop", kInit, mode_crashloop},
    {"checkload", kInit, mode_crashloop},
    {"noprepare", kInit, mode_noprepare},
    {"batchnorm", kInit, mode_batchnorm},
    {"sleep", kOwnInit, mode_sleep},
};

/* accel_init for the modes that do not make their own accelerator; sets world and g_rank. */
static void start(struct run* run, enum setup setup, const char* rank_env) {
  accel_config* cfg = NULL;
  int32_t world = 1;
  int idx = -1;
  CHECK(accel_config_new(&cfg));
  if (setup == kInitTimeout) CHECK(accel_config_set(cfg, "collective_timeout", "2"));
  CHECK(accel_init(cfg, &run->acc));
  accel_config_free(cfg);
  CHECK(accel_num_processes(run->acc, &world));
  run->world = world;
  CHECK(accel_process_index(run->acc, &idx));
  /* Under mpirun or srun RANK is not set: the library reads the engine's own variables. */
  EXPECT(!rank_env || idx == g_rank, "process index %d, RANK %d", idx, g_rank);
  g_rank = idx;
}

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "check";
  const char* rank_env = getenv("RANK");
  const size_t count = sizeof kModes / sizeof kModes[0];
  const struct mode* mode = NULL;
  struct run run;
  size_t i;
  int code;
  for (i = 0; i < count && !mode; ++i)
    if (strcmp(kModes[i].name, name) == 0) mode = &kModes[i];
  if (!mode) {
    fprintf(stderr, "unknown mode %s; the modes:", name);
    for (i = 0; i < count; ++i) fprintf(stderr, " %s", kModes[i].name);
    fprintf(stderr, "\n");
    return 64;
  }
  g_rank = rank_env ? atoi(rank_env) : 0;
  memset(&run, 0, sizeof run);
  run.mode = mode->name;
  run.world = 1;
  run.argc = argc;
  run.argv = argv;
  if (mode->setup != kOwnInit) start(&run, mode->setup, rank_env);
  code = mode->fn(&run);
  if (code == kSync) {
    CHECK(accel_wait_for_everyone(run.acc));
    code = 0;
  }
  accel_accelerator_free(run.acc);
  return code;
}
