/*
 * text_program.c - rank program for the text-data multi-process tests (tests/mp/mp_test.cpp).
 *
 *   text_program inference      split_between_processes (lists and tensors) and the trigger
 *   text_program stream         streams sharded both ways (dispatch_batches on and off): each
 *                               configuration's batches as "rank R: stream N BS SPLIT DROP
 *                               DISPATCH: p p|p p|...", then a stream failing on the main process
 *   text_program join           10 samples, 4 per step over all ranks, even_batches off inside
 *                               join_uneven_inputs: on 2 ranks rank 0 makes a third step while
 *                               rank 1 has joined; prints the final parameters (on 1 process
 *                               the reference: the third step's loss halved, as Join divides by 2)
 *   text_program ragged BATCH   three SGD steps of a masked next-token loss over ragged, padded,
 *                               length-grouped batches of BATCH per process; prints the loss of
 *                               each step and the parameters' sums (1 x 64 must equal 2 x 32)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static int32_t g_rank, g_world;

static void print_indices(const char* what, const int64_t* v, size_t n) {
  char line[512];
  int used = snprintf(line, sizeof line, "rank %d: %s:", g_rank, what);
  for (size_t i = 0; i < n && used < (int)sizeof line - 24; ++i)
    used += snprintf(line + used, sizeof line - (size_t)used, " %lld", (long long)v[i]);
  puts(line);
}

static void split_list(accel_accelerator* acc, int64_t count, bool pad) {
  int64_t idx[64];
  size_t n = 0;
  char what[64];
  CHECK(accel_split_between_processes(acc, count, pad, idx, 64, &n));
  snprintf(what, sizeof what, "list of %lld%s", (long long)count, pad ? " padded" : "");
  print_indices(what, idx, n);
}

/* Rows i of a [count, 2] int64 tensor hold (i, 10 i); prints the first column of this rank's. */
static void split_tensor(accel_accelerator* acc, int64_t count, bool pad) {
  int64_t data[128], shape[2] = {count, 2}, rows[64];
  accel_tensor *t = NULL, *mine = NULL;
  size_t size = 0, dims = 0;
  int64_t got[2];
  char what[64];
  for (int64_t i = 0; i < count; ++i) {
    data[2 * i] = i;
    data[2 * i + 1] = 10 * i;
  }
  CHECK(accel_tensor_from_data(data, (size_t)count * 16, ACCEL_DTYPE_I64, shape, 2, &t));
  CHECK(accel_split_tensor_between_processes(acc, t, pad, &mine));
  CHECK(accel_tensor_shape(mine, got, 2, &dims));
  CHECK(accel_tensor_to_data(mine, data, sizeof data, &size));
  for (int64_t i = 0; i < got[0]; ++i) {
    rows[i] = data[2 * i];
    if (data[2 * i + 1] != 10 * data[2 * i]) {
      fprintf(stderr, "rank %d: row %lld is not a row of the input\n", g_rank, (long long)i);
      exit(1);
    }
  }
  snprintf(what, sizeof what, "tensor of %lld%s", (long long)count, pad ? " padded" : "");
  print_indices(what, rows, (size_t)got[0]);
  accel_tensor_free(mine);
  accel_tensor_free(t);
}

/* A loader with shard off reads every batch on every rank (data split beforehand). */
static void unsharded(accel_accelerator* acc) {
  int64_t v[5] = {0, 1, 2, 3, 4}, n = 5, count = 0;
  accel_tensor* t = NULL;
  accel_dataset* ds = NULL;
  accel_dataloader* dl = NULL;
  CHECK(accel_tensor_from_data(v, sizeof v, ACCEL_DTYPE_I64, &n, 1, &t));
  CHECK(accel_dataset_from_tensors((const accel_tensor* const*)&t, 1, &ds));
  CHECK(accel_dataloader_new(acc, ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", "2"));
  CHECK(accel_dataloader_set(dl, "shard", "false"));
  for (;;) {
    accel_tensor* f[1];
    size_t got = 0;
    int64_t rows = 0;
    CHECK(accel_dataloader_next(dl, f, 1, &got));
    if (got == 0) break;
    CHECK(accel_tensor_element_count(f[0], &rows));
    count += rows;
    accel_tensor_free(f[0]);
  }
  printf("rank %d: unsharded loader read %lld samples\n", g_rank, (long long)count);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  accel_tensor_free(t);
}

static void* raise_later(void* acc) {
  usleep(200 * 1000);
  CHECK(accel_set_trigger((accel_accelerator*)acc));
  return NULL;
}

/* Rank 1 raises the trigger at step 3 from another thread, while its main thread waits inside a
 * collective (rank 0 comes late to it); every rank must see it at that step's check. */
static void trigger_loop(accel_accelerator* acc) {
  for (int step = 0; step < 6; ++step) {
    pthread_t raiser;
    const bool raise = g_rank == g_world - 1 && step == 3;
    if (raise) pthread_create(&raiser, NULL, raise_later, acc);
    if (step == 3 && g_rank == 0) usleep(500 * 1000);
    CHECK(accel_wait_for_everyone(acc));
    if (raise) pthread_join(raiser, NULL);
    bool stop = false;
    CHECK(accel_check_trigger(acc, &stop));
    if (stop) {
      printf("rank %d: trigger stopped the loop at step %d\n", g_rank, step);
      return;
    }
  }
  printf("rank %d: the trigger was never seen\n", g_rank);
}

static int inference(accel_accelerator* acc) {
  split_list(acc, 3, false);
  split_list(acc, 3, true);
  split_list(acc, 4, true);
  split_list(acc, 2, false);
  split_tensor(acc, 5, false);
  split_tensor(acc, 5, true);
  unsharded(acc);
  trigger_loop(acc);
  return 0;
}

/* Stream position p: p % 3 tokens (p, p, ...) and the label p; `fail_at` fails once. */
struct Stream {
  int64_t length;
  int64_t fail_at;
};

static int32_t stream_sample(int64_t epoch, int64_t position, accel_sample* sample, void* user) {
  struct Stream* s = user;
  int64_t tokens[2] = {position, position};
  (void)epoch;
  if (position == s->fail_at) {
    s->fail_at = -1;
    return 3;
  }
  if (position >= s->length) return 1;
  CHECK(accel_sample_set_field(sample, 0, tokens, (size_t)(position % 3) * 8));
  CHECK(accel_sample_set_field(sample, 1, &position, 8));
  return 0;
}

static accel_dataloader* stream_loader(accel_accelerator* acc, struct Stream* s, accel_dataset** ds,
                                       const char* batch, int split, int drop, int dispatch,
                                       int workers) {
  const accel_dtype dtypes[] = {ACCEL_DTYPE_I64, ACCEL_DTYPE_I64};
  const size_t dim_counts[] = {1, 0};
  const int64_t dims[] = {ACCEL_RAGGED};
  accel_dataloader* dl = NULL;
  CHECK(accel_dataset_from_stream(2, dtypes, dim_counts, dims, stream_sample, s, NULL, ds));
  CHECK(accel_dataloader_new(acc, *ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", batch));
  CHECK(accel_dataloader_set(dl, "split_batches", split ? "true" : "false"));
  CHECK(accel_dataloader_set(dl, "drop_last", drop ? "true" : "false"));
  CHECK(accel_dataloader_set(dl, "dispatch_batches", dispatch ? "true" : "false"));
  CHECK(accel_dataloader_set(dl, "num_workers", workers ? "1" : "0"));
  return dl;
}

/* The labels of the next batch appended to `line`; false at the end of the epoch. */
static bool append_batch(accel_dataloader* dl, char* line, size_t cap, bool first) {
  accel_tensor* f[3];
  size_t n = 0, size = 0;
  int64_t labels[64];
  CHECK(accel_dataloader_next(dl, f, 3, &n));
  if (n == 0) return false;
  CHECK(accel_tensor_to_data(f[1], labels, sizeof labels, &size));
  size_t used = strlen(line);
  if (!first) used += (size_t)snprintf(line + used, cap - used, "|");
  for (size_t i = 0; i < size / 8; ++i)
    used += (size_t)snprintf(line + used, cap - used, "%s%lld", i ? " " : "", (long long)labels[i]);
  for (size_t i = 0; i < n; ++i) accel_tensor_free(f[i]);
  return true;
}

static int streams(accel_accelerator* acc) {
  /* n, batch size, split, drop_last, dispatch */
  static const int configs[][5] = {{11, 2, 0, 0, 1}, {11, 2, 0, 0, 0}, {10, 3, 0, 1, 1},
                                   {10, 3, 0, 1, 0}, {13, 6, 1, 0, 1}, {13, 6, 1, 0, 0},
                                   {2, 2, 0, 0, 1},  {2, 2, 0, 0, 0}};
  for (size_t c = 0; c < sizeof configs / sizeof configs[0]; ++c) {
    const int* k = configs[c];
    struct Stream s = {k[0], -1};
    accel_dataset* ds = NULL;
    char batch[16], line[1024];
    snprintf(batch, sizeof batch, "%d", k[1]);
    accel_dataloader* dl = stream_loader(acc, &s, &ds, batch, k[2], k[3], k[4], (int)(c % 2));
    snprintf(line, sizeof line, "rank %d: stream %d %d %d %d %d: ", g_rank, k[0], k[1], k[2], k[3],
             k[4]);
    for (bool first = true; append_batch(dl, line, sizeof line, first); first = false) {
    }
    puts(line);
    accel_dataloader_free(dl);
    accel_dataset_free(ds);
  }
  /* The main process's stream fails inside the second global batch: every rank's call fails (none
   * waits forever), and the next call goes on from the batch that failed. */
  struct Stream s = {20, 7};
  accel_dataset* ds = NULL;
  accel_dataloader* dl = stream_loader(acc, &s, &ds, "2", 0, 0, 1, 0);
  accel_tensor* f[3];
  size_t n = 0;
  char line[256] = "";
  CHECK(accel_dataloader_next(dl, f, 3, &n));
  for (size_t i = 0; i < n; ++i) accel_tensor_free(f[i]);
  const accel_status st = accel_dataloader_next(dl, f, 3, &n);
  printf("rank %d: dispatched failure: %s\n", g_rank, accel_status_name(st));
  append_batch(dl, line, sizeof line, true);
  printf("rank %d: after the failure: %s\n", g_rank, line);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  return 0;
}

/* 64 sentences of 1..17 tokens (one global batch per epoch: each step is an epoch, shuffled anew)
 * from a vocabulary of 32. */
static int32_t sentence_lengths(int64_t index, int64_t* lengths, size_t count, void* user) {
  (void)count;
  (void)user;
  lengths[0] = 1 + (index * 7) % 17;
  return 0;
}

static int32_t sentence_fill(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                             void* user) {
  (void)count;
  (void)user;
  int64_t* tokens = buffers[0];
  for (size_t j = 0; j < sizes[0] / 8; ++j) tokens[j] = (index * 5 + (int64_t)j * 3) % 32;
  return 0;
}

/* A per-sentence mean over its real tokens, then the mean over sentences: the same loss whatever
 * the padding, and the same average whether 64 sentences are on one process or 32 on each of 2. */
static const char* kModel =
    "def training_step(self, tokens, mask):\n"
    "    logits = self.out.forward(torch.tanh(self.embed.forward(tokens)))\n"
    "    target = torch.remainder(tokens + 1, 32)\n"
    "    ce = torch.cross_entropy_loss(logits.transpose(1, 2), target, None, 0)\n"
    "    m = mask.float()\n"
    "    per_sentence = (ce * m).sum(1) / m.sum(1).clamp_min(1.0)\n"
    "    return per_sentence.mean()\n";

static int ragged(accel_accelerator* acc, const char* batch) {
  const accel_dtype dtype = ACCEL_DTYPE_I64;
  const size_t dim_count = 1;
  const int64_t dims[] = {ACCEL_RAGGED};
  accel_dataset* ds = NULL;
  accel_dataloader* dl = NULL;
  accel_model* model = NULL;
  accel_optimizer* opt = NULL;
  CHECK(accel_set_seed(acc, 7, false));
  CHECK(accel_dataset_from_ragged_callback(64, 1, &dtype, &dim_count, dims, sentence_lengths,
                                           sentence_fill, NULL, NULL, &ds));
  CHECK(accel_dataloader_new(acc, ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", batch));
  CHECK(accel_dataloader_set(dl, "shuffle", "true"));
  CHECK(accel_dataloader_set(dl, "group_by_length", "true"));
  CHECK(accel_dataloader_set(dl, "pad_to_multiple_of", "4"));
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "embed", "embedding", "num_embeddings=32 embedding_dim=8"));
  CHECK(accel_model_add_layer(model, "out", "linear", "in_features=8 out_features=32"));
  CHECK(accel_model_define(model, kModel));
  CHECK(accel_optimizer_new(model, "sgd", &opt));
  CHECK(accel_optimizer_set(opt, "lr", "0.5"));
  void* objects[] = {model, opt, dl};
  CHECK(accel_prepare(acc, objects, 3));
  for (int step = 0; step < 3; ++step) {
    accel_tensor* fields[2];
    size_t n = 0;
    accel_tensor_list* out = NULL;
    accel_tensor *loss = NULL, *mean = NULL;
    double value = 0;
    CHECK(accel_dataloader_next(dl, fields, 2, &n));
    if (n == 0) CHECK(accel_dataloader_next(dl, fields, 2, &n)); /* the next epoch */
    CHECK(accel_model_call(model, "training_step", (const accel_tensor* const*)fields, 2, &out));
    CHECK(accel_tensor_list_get(out, 0, &loss));
    CHECK(accel_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_optimizer_zero_grad(opt));
    CHECK(accel_reduce(acc, loss, ACCEL_REDUCE_MEAN, &mean));
    CHECK(accel_tensor_item_f64(mean, &value));
    printf("rank %d: step %d loss %.7f\n", g_rank, step, value);
    accel_tensor_free(mean);
    accel_tensor_free(loss);
    accel_tensor_list_free(out);
    accel_tensor_free(fields[0]);
    accel_tensor_free(fields[1]);
  }
  const char* names[] = {"embed.weight", "out.weight", "out.bias"};
  for (int i = 0; i < 3; ++i) {
    accel_tensor* p = NULL;
    float values[32 * 8];
    size_t size = 0;
    double sum = 0;
    CHECK(accel_model_tensor(model, names[i], &p));
    CHECK(accel_tensor_to_data(p, values, sizeof values, &size));
    for (size_t k = 0; k < size / sizeof(float); ++k) sum += values[k] * (double)(k % 7 + 1);
    printf("rank %d: %s %.7f\n", g_rank, names[i], sum);
    accel_tensor_free(p);
  }
  accel_optimizer_free(opt);
  accel_model_free(model);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  return 0;
}

static int join(accel_accelerator* acc) {
  float xs[10 * 3], ys[10];
  for (int i = 0; i < 10; ++i) {
    for (int j = 0; j < 3; ++j) xs[3 * i + j] = (float)((i * 7 + j * 3) % 5) - 2.0f;
    ys[i] = (float)(i % 3) - 1.0f;
  }
  const int64_t xshape[] = {10, 3}, yshape[] = {10, 1};
  accel_tensor *x = NULL, *y = NULL;
  CHECK(accel_tensor_from_data(xs, sizeof xs, ACCEL_DTYPE_F32, xshape, 2, &x));
  CHECK(accel_tensor_from_data(ys, sizeof ys, ACCEL_DTYPE_F32, yshape, 2, &y));
  const accel_tensor* fields[] = {x, y};
  accel_dataset* ds = NULL;
  accel_dataloader* dl = NULL;
  accel_model* model = NULL;
  accel_optimizer* opt = NULL;
  CHECK(accel_dataset_from_tensors(fields, 2, &ds));
  CHECK(accel_dataloader_new(acc, ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", g_world == 1 ? "4" : "2"));
  CHECK(accel_set_seed(acc, 3, false));
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "fc", "linear", "in_features=3 out_features=1"));
  CHECK(accel_model_define(model,
                           "def training_step(self, x, y, scale):\n"
                           "    return torch.mse_loss(self.fc.forward(x), y) * scale\n"));
  CHECK(accel_optimizer_new(model, "sgd", &opt));
  CHECK(accel_optimizer_set(opt, "lr", "0.1"));
  void* objects[] = {model, opt, dl};
  CHECK(accel_prepare(acc, objects, 3));
  CHECK(accel_join_uneven_inputs_begin(acc, 0));
  int steps = 0;
  for (;;) {
    accel_tensor* batch[2];
    size_t n = 0;
    int64_t rows = 0;
    CHECK(accel_dataloader_next(dl, batch, 2, &n));
    if (n == 0) break;
    CHECK(accel_tensor_element_count(batch[1], &rows));
    /* One process stands for two: its short last batch is the only one left, averaged with a
     * joined rank's zeros. */
    const float scale_value = g_world == 1 && rows < 4 ? 0.5f : 1.0f;
    accel_tensor* scale = NULL;
    CHECK(accel_tensor_from_data(&scale_value, 4, ACCEL_DTYPE_F32, NULL, 0, &scale));
    const accel_tensor* in[] = {batch[0], batch[1], scale};
    accel_tensor_list* out = NULL;
    accel_tensor* loss = NULL;
    CHECK(accel_model_call(model, "training_step", in, 3, &out));
    CHECK(accel_tensor_list_get(out, 0, &loss));
    CHECK(accel_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(loss);
    accel_tensor_list_free(out);
    accel_tensor_free(scale);
    accel_tensor_free(batch[0]);
    accel_tensor_free(batch[1]);
    ++steps;
  }
  CHECK(accel_join_uneven_inputs_end(acc));
  printf("rank %d: %d steps\n", g_rank, steps);
  const char* names[] = {"fc.weight", "fc.bias"};
  for (int i = 0; i < 2; ++i) {
    accel_tensor* p = NULL;
    float v[3] = {0, 0, 0};
    size_t size = 0;
    CHECK(accel_model_tensor(model, names[i], &p));
    CHECK(accel_tensor_to_data(p, v, sizeof v, &size));
    printf("rank %d: %s %.7f %.7f %.7f\n", g_rank, names[i], v[0], v[1], v[2]);
    accel_tensor_free(p);
  }
  accel_optimizer_free(opt);
  accel_model_free(model);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  accel_tensor_free(x);
  accel_tensor_free(y);
  return 0;
}

int main(int argc, char** argv) {
  accel_accelerator* acc = NULL;
  if (argc < 2) {
    fprintf(stderr, "usage: text_program inference | stream | join | ragged BATCH\n");
    return 2;
  }
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &g_rank));
  CHECK(accel_num_processes(acc, &g_world));
  int rc = 2;
  if (strcmp(argv[1], "inference") == 0) rc = inference(acc);
  if (strcmp(argv[1], "stream") == 0) rc = streams(acc);
  if (strcmp(argv[1], "join") == 0) rc = join(acc);
  if (strcmp(argv[1], "ragged") == 0 && argc == 3) rc = ragged(acc, argv[2]);
  fflush(stdout);
  accel_accelerator_free(acc);
  return rc;
}
