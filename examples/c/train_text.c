/*
 * train_text.c - a byte-level transformer language model trained on real text with libaccel, then
 * batched inference split across processes.
 *
 *   ./train_text                          one process
 *   accel launch -n 2 ./train_text        two processes, same code
 *   options: --epochs N (1) --batch-size B (32, per process) --lr X (4e-3) --max-steps S (0: whole
 *            epochs) --max-length L (128) --no-grouping --data DIR (/usr/share/games/fortunes)
 *
 * The text is Debian's `fortunes` package: 15,000 quotations, jokes and verses of 1 to 4,000
 * bytes, plain text files with one `%` line between entries. Each entry is one sample, so the
 * samples have real, widely varying lengths. One in ten is held out.
 *
 * Training: each sample's bytes are a ragged field, padded per batch with an attention mask,
 * truncated to --max-length, batched by similar lengths (group_by_length) unless --no-grouping.
 * The loss is the mean next-byte cross entropy over real (unmasked) bytes. After training: the
 * held-out perplexity (exp of the mean cross entropy per byte over every process's bytes), then
 * every held-out entry scored once, split between the processes with split_between_processes,
 * read by an unsharded dataloader, gathered, and the least and most surprising entries printed.
 * Every 10 steps it logs loss, lr, samples/s and bytes/s, and at the end the held-out perplexity,
 * to the trackers the configuration names (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs); progress
 * lines go through the accelerator's logger.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Logs `count` named numbers at `step` to the run's trackers (none unless log_with is set). */
static void log_numbers(accel_accelerator* acc, int64_t step, const char* const* keys,
                        const double* numbers, size_t count) {
  accel_values* values = NULL;
  CHECK(accel_values_new(&values));
  for (size_t i = 0; i < count; ++i) CHECK(accel_values_set_number(values, keys[i], numbers[i]));
  CHECK(accel_log(acc, values, step));
  accel_values_free(values);
}

/* d_model 128, 4 heads of 32, MLP 512, 2 blocks, positions up to 512. The attention is causal, so
 * with right padding a real byte never sees a padded one and needs no key mask. */
static const char* kModel =
    "def attention(self, x, wqkv, bqkv, wo, bo):\n"
    "    B = x.size(0)\n"
    "    T = x.size(1)\n"
    "    qkv = torch.linear(x, wqkv, bqkv).view(B, T, 3, 4, 32).permute(2, 0, 3, 1, 4)\n"
    "    causal = torch.ones([T, T], device=x.device).triu(1) > 0.5\n"
    "    att = torch.matmul(qkv[0], qkv[1].transpose(-2, -1)) * 0.17677669529663687\n"
    "    att = torch.softmax(att.masked_fill(causal, -1e9), -1)\n"
    "    y = torch.matmul(att, qkv[2]).transpose(1, 2).reshape(B, T, 128)\n"
    "    return torch.linear(y, wo, bo)\n"
    "\n"
    "def forward(self, tokens):\n"
    "    T = tokens.size(1)\n"
    "    x = self.tok.forward(tokens.long())\n"
    "    x = x + self.pos.forward(torch.arange(T, device=tokens.device))\n"
    "    x = x + self.attention(self.ln1a.forward(x), self.qkva.weight, self.qkva.bias,\n"
    "                           self.outa.weight, self.outa.bias)\n"
    "    x = x + self.fc2a.forward(torch.gelu(self.fc1a.forward(self.ln2a.forward(x))))\n"
    "    x = x + self.attention(self.ln1b.forward(x), self.qkvb.weight, self.qkvb.bias,\n"
    "                           self.outb.weight, self.outb.bias)\n"
    "    x = x + self.fc2b.forward(torch.gelu(self.fc1b.forward(self.ln2b.forward(x))))\n"
    "    return self.head.forward(self.lnf.forward(x))\n"
    "\n"
    "def byte_losses(self, tokens, mask):\n"
    "    logits = self.forward(tokens[:, :-1])\n"
    "    ce = torch.cross_entropy_loss(logits.transpose(1, 2), tokens[:, 1:].long(), None, 0)\n"
    "    return ce * mask[:, 1:].float()\n"
    "\n"
    "def training_step(self, tokens, mask):\n"
    "    m = mask[:, 1:].float()\n"
    "    return self.byte_losses(tokens, mask).sum() / m.sum().clamp_min(1.0)\n"
    "\n"
    "def eval_sums(self, tokens, mask):\n"
    "    return torch.stack([self.byte_losses(tokens, mask).sum(1), mask[:, 1:].float().sum(1)], "
    "1)\n"
    "\n"
    "def entry_losses(self, tokens, mask):\n"
    "    m = mask[:, 1:].float()\n"
    "    return self.byte_losses(tokens, mask).sum(1) / m.sum(1).clamp_min(1.0)\n";

struct Corpus {
  char** text;
  int64_t* length;
  int64_t count;
};

static void add_entry(struct Corpus* c, const char* start, size_t length) {
  while (length > 0 && start[length - 1] == '\n') --length;
  if (length == 0) return;
  c->text = realloc(c->text, (size_t)(c->count + 1) * sizeof *c->text);
  c->length = realloc(c->length, (size_t)(c->count + 1) * sizeof *c->length);
  c->text[c->count] = malloc(length);
  memcpy(c->text[c->count], start, length);
  c->length[c->count++] = (int64_t)length;
}

/* Splits one fortune file at its "%" lines. */
static void read_fortunes(struct Corpus* c, const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* all = malloc((size_t)size + 1);
  const size_t got = fread(all, 1, (size_t)size, f);
  fclose(f);
  all[got] = '\0';
  const char* entry = all;
  for (const char* line = all; *line;) {
    const char* end = strchr(line, '\n');
    const char* next = end ? end + 1 : line + strlen(line);
    if (strncmp(line, "%\n", 2) == 0 || strcmp(line, "%") == 0) {
      add_entry(c, entry, (size_t)(line - entry));
      entry = next;
    }
    line = next;
  }
  add_entry(c, entry, strlen(entry));
  free(all);
}

static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Every fortune file in `dir` (not the .dat indexes, the .u8 links, nor ascii-art), in name order,
 * so every process builds the same corpus; entries 0, 10, 20, ... are held out. */
static void load_corpus(const char* dir, struct Corpus* train, struct Corpus* held_out) {
  DIR* d = opendir(dir);
  if (!d) {
    fprintf(stderr, "cannot open %s: install Debian's `fortunes` package\n", dir);
    exit(1);
  }
  char* names[256];
  size_t n = 0;
  for (struct dirent* e; (e = readdir(d)) && n < 256;) {
    const size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || (len > 4 && strcmp(e->d_name + len - 4, ".dat") == 0) ||
        (len > 3 && strcmp(e->d_name + len - 3, ".u8") == 0) || strcmp(e->d_name, "ascii-art") == 0)
      continue;
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  struct Corpus all = {0};
  for (size_t i = 0; i < n; ++i) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    read_fortunes(&all, path);
    free(names[i]);
  }
  for (int64_t i = 0; i < all.count; ++i) {
    struct Corpus* to = i % 10 == 0 ? held_out : train;
    add_entry(to, all.text[i], (size_t)all.length[i]);
    free(all.text[i]);
  }
  free(all.text);
  free(all.length);
}

static int32_t entry_length(int64_t index, int64_t* lengths, size_t count, void* user) {
  (void)count;
  lengths[0] = ((struct Corpus*)user)->length[index];
  return 0;
}

static int32_t entry_bytes(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                           void* user) {
  (void)count;
  memcpy(buffers[0], ((struct Corpus*)user)->text[index], sizes[0]);
  return 0;
}

static accel_dataset* text_dataset(struct Corpus* c) {
  const accel_dtype dtype = ACCEL_DTYPE_U8;
  const size_t dim_count = 1;
  const int64_t dims[] = {ACCEL_RAGGED};
  accel_dataset* ds = NULL;
  CHECK(accel_dataset_from_ragged_callback(c->count, 1, &dtype, &dim_count, dims, entry_length,
                                           entry_bytes, c, NULL, &ds));
  return ds;
}

/* A dataset of the held-out entries named by `indices` (this process's share). */
struct Subset {
  struct Corpus* corpus;
  const int64_t* indices;
};

static int32_t subset_length(int64_t index, int64_t* lengths, size_t count, void* user) {
  const struct Subset* s = user;
  return entry_length(s->indices[index], lengths, count, s->corpus);
}

static int32_t subset_bytes(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                            void* user) {
  const struct Subset* s = user;
  return entry_bytes(s->indices[index], buffers, sizes, count, s->corpus);
}

static accel_tensor* call_one(accel_model* model, const char* method, accel_tensor* const* inputs) {
  accel_tensor_list* outputs = NULL;
  accel_tensor* result = NULL;
  CHECK(accel_model_call(model, method, (const accel_tensor* const*)inputs, 2, &outputs));
  CHECK(accel_tensor_list_get(outputs, 0, &result));
  accel_tensor_list_free(outputs);
  return result;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static accel_model* build_model(void) {
  static const char* const layers[][3] = {
      {"tok", "embedding", "num_embeddings=256 embedding_dim=128"},
      {"pos", "embedding", "num_embeddings=512 embedding_dim=128"},
      {"ln1a", "layer_norm", "normalized_shape=128"},
      {"qkva", "linear", "in_features=128 out_features=384"},
      {"outa", "linear", "in_features=128 out_features=128"},
      {"ln2a", "layer_norm", "normalized_shape=128"},
      {"fc1a", "linear", "in_features=128 out_features=512"},
      {"fc2a", "linear", "in_features=512 out_features=128"},
      {"ln1b", "layer_norm", "normalized_shape=128"},
      {"qkvb", "linear", "in_features=128 out_features=384"},
      {"outb", "linear", "in_features=128 out_features=128"},
      {"ln2b", "layer_norm", "normalized_shape=128"},
      {"fc1b", "linear", "in_features=128 out_features=512"},
      {"fc2b", "linear", "in_features=512 out_features=128"},
      {"lnf", "layer_norm", "normalized_shape=128"},
      {"head", "linear", "in_features=128 out_features=256"}};
  accel_model* model = NULL;
  CHECK(accel_model_new(&model));
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; ++i)
    CHECK(accel_model_add_layer(model, layers[i][0], layers[i][1], layers[i][2]));
  CHECK(accel_model_define(model, kModel));
  return model;
}

/* exp(mean cross entropy per byte) over the held-out entries of every process. */
static double held_out_perplexity(accel_accelerator* acc, accel_model* model,
                                  accel_dataloader* held) {
  double sums[2] = {0, 0};
  CHECK(accel_model_train(model, false));
  for (;;) {
    accel_tensor* fields[2];
    size_t n = 0, size = 0;
    CHECK(accel_dataloader_next(held, fields, 2, &n));
    if (n == 0) break;
    accel_tensor* s = call_one(model, "eval_sums", fields); /* [entries, 2] */
    accel_tensor* all = NULL;
    int64_t count = 0;
    /* Every process's rows; on the last batch the entries repeated to even it out are dropped. */
    CHECK(accel_gather_for_metrics(acc, s, &all));
    CHECK(accel_tensor_element_count(all, &count));
    float* values = malloc((size_t)count * sizeof *values);
    CHECK(accel_tensor_to_data(all, values, (size_t)count * sizeof *values, &size));
    for (int64_t i = 0; i + 1 < count; i += 2) {
      sums[0] += values[i];
      sums[1] += values[i + 1];
    }
    free(values);
    accel_tensor_free(all);
    accel_tensor_free(s);
    accel_tensor_free(fields[0]);
    accel_tensor_free(fields[1]);
  }
  return exp(sums[0] / (sums[1] > 0 ? sums[1] : 1));
}

/* "least surprising (2.50 nats/byte): <the entry's first 120 bytes on one line>" */
static void print_entry(accel_accelerator* acc, const char* which, float score,
                        const struct Corpus* c, int64_t i) {
  char line[256];
  const int shown = c->length[i] < 120 ? (int)c->length[i] : 120;
  snprintf(line, sizeof line, "%s surprising (%.2f nats/byte): %.*s", which, score, shown,
           c->text[i]);
  for (char* p = line; *p; ++p)
    if (*p == '\n' || *p == '\t') *p = ' ';
  CHECK(accel_print(acc, line));
}

/* Scores every held-out entry once: the processes split the entries (padded so all have as many),
 * each scores its share in batches, and the per-entry losses are gathered in entry order. */
static void score_entries(accel_accelerator* acc, accel_model* model, struct Corpus* held,
                          const char* max_length) {
  size_t mine_count = 0;
  int32_t world = 1;
  CHECK(accel_num_processes(acc, &world));
  if (accel_split_between_processes(acc, held->count, true, NULL, 0, &mine_count) !=
      ACCEL_ERR_BUFFER_TOO_SMALL)
    exit(1);
  int64_t* mine = malloc(mine_count * sizeof *mine);
  CHECK(accel_split_between_processes(acc, held->count, true, mine, mine_count, &mine_count));
  struct Subset subset = {held, mine};
  const accel_dtype dtype = ACCEL_DTYPE_U8;
  const size_t dim_count = 1;
  const int64_t dims[] = {ACCEL_RAGGED};
  accel_dataset* ds = NULL;
  CHECK(accel_dataset_from_ragged_callback((int64_t)mine_count, 1, &dtype, &dim_count, dims,
                                           subset_length, subset_bytes, &subset, NULL, &ds));
  /* Each process reads its own share whole, in order: the loader does not shard it again. */
  accel_dataloader* dl = NULL;
  CHECK(accel_dataloader_new(acc, ds, &dl));
  CHECK(accel_dataloader_set(dl, "shard", "false"));
  CHECK(accel_dataloader_set(dl, "batch_size", "32"));
  CHECK(accel_dataloader_set(dl, "max_length", max_length));
  CHECK(accel_dataloader_set(dl, "truncation", "true"));
  float* losses = malloc(mine_count * sizeof *losses);
  size_t done = 0;
  for (;;) {
    accel_tensor* fields[2];
    size_t n = 0, size = 0;
    CHECK(accel_dataloader_next(dl, fields, 2, &n));
    if (n == 0) break;
    accel_tensor* l = call_one(model, "entry_losses", fields);
    CHECK(accel_tensor_to_data(l, losses + done, (mine_count - done) * sizeof *losses, &size));
    done += size / sizeof *losses;
    accel_tensor_free(l);
    accel_tensor_free(fields[0]);
    accel_tensor_free(fields[1]);
  }
  /* Every process holds mine_count scores (padding included): gathered in rank order, which is
   * entry order; the padding repeats an entry and is dropped by its index. */
  const int64_t shape[] = {(int64_t)mine_count};
  accel_tensor *t = NULL, *all = NULL, *t_idx = NULL, *all_idx = NULL;
  CHECK(accel_tensor_from_data(losses, mine_count * sizeof *losses, ACCEL_DTYPE_F32, shape, 1, &t));
  CHECK(accel_tensor_from_data(mine, mine_count * sizeof *mine, ACCEL_DTYPE_I64, shape, 1, &t_idx));
  /* accel_gather, not gather_for_metrics: these rows are no dataloader's, and gather_for_metrics
   * would drop rows by the training loader's remainder (its last batch is still in use: the loop
   * stopped at the step count without asking for the end of the epoch). */
  CHECK(accel_gather(acc, t, &all));
  CHECK(accel_gather(acc, t_idx, &all_idx));
  const size_t total = mine_count * (size_t)world;
  float* scores = malloc(total * sizeof *scores);
  int64_t* index = malloc(total * sizeof *index);
  size_t size = 0;
  CHECK(accel_tensor_to_data(all, scores, total * sizeof *scores, &size));
  CHECK(accel_tensor_to_data(all_idx, index, total * sizeof *index, &size));
  if (size != total * sizeof *index) {
    fprintf(stderr, "gathered %zu bytes of indexes, expected %zu\n", size, total * sizeof *index);
    exit(1);
  }
  int64_t best = -1, worst = -1, scored = 0;
  for (size_t i = 0; i < total; ++i) {
    if (i > 0 && index[i] <= index[i - 1]) continue; /* padding: an entry seen already */
    ++scored;
    if (held->length[index[i]] < 2) continue; /* one byte: nothing to predict, a loss of 0 */
    if (best < 0 || scores[i] < scores[best]) best = (int64_t)i;
    if (worst < 0 || scores[i] > scores[worst]) worst = (int64_t)i;
  }
  char line[512];
  snprintf(line, sizeof line, "scored %lld held-out entries (%zu per process, padding dropped)",
           (long long)scored, mine_count);
  CHECK(accel_print(acc, line));
  print_entry(acc, "least", scores[best], held, index[best]);
  print_entry(acc, "most", scores[worst], held, index[worst]);
  free(scores);
  free(index);
  accel_tensor_free(t);
  accel_tensor_free(all);
  accel_tensor_free(t_idx);
  accel_tensor_free(all_idx);
  free(losses);
  free(mine);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
}

int main(int argc, char** argv) {
  int epochs = 1, batch = 32, grouping = 1;
  int64_t max_steps = 0, max_length = 128;
  double lr = 4e-3;
  const char* data = "/usr/share/games/fortunes";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
      epochs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc)
      lr = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc)
      max_steps = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--max-length") && i + 1 < argc)
      max_length = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--no-grouping"))
      grouping = 0;
    else if (!strcmp(argv[i], "--data") && i + 1 < argc)
      data = argv[++i];
    else {
      fprintf(stderr, "unknown option %s (see the comment at the top of train_text.c)\n", argv[i]);
      return 2;
    }
  }
  struct Corpus train_text = {0}, held_text = {0};
  load_corpus(data, &train_text, &held_text);

  accel_accelerator* acc = NULL;
  CHECK(accel_init(NULL, &acc));
  int32_t world = 1;
  CHECK(accel_num_processes(acc, &world));
  CHECK(accel_set_seed(acc, 1234, false));
  accel_model* model = build_model();
  int64_t params = 0;
  CHECK(accel_model_parameter_element_count(model, &params));

  accel_dataset* train_set = text_dataset(&train_text);
  accel_dataset* held_set = text_dataset(&held_text);
  accel_dataloader *train = NULL, *held = NULL;
  char text[64];
  CHECK(accel_dataloader_new(acc, train_set, &train));
  snprintf(text, sizeof text, "%d", batch);
  CHECK(accel_dataloader_set(train, "batch_size", text));
  CHECK(accel_dataloader_set(train, "shuffle", "true"));
  CHECK(accel_dataloader_set(train, "seed", "42"));
  CHECK(accel_dataloader_set(train, "group_by_length", grouping ? "true" : "false"));
  snprintf(text, sizeof text, "%lld", (long long)max_length);
  CHECK(accel_dataloader_set(train, "max_length", text));
  CHECK(accel_dataloader_set(train, "truncation", "true"));
  CHECK(accel_dataloader_set(train, "num_workers", "1"));
  CHECK(accel_dataloader_new(acc, held_set, &held));
  CHECK(accel_dataloader_set(held, "batch_size", "32"));
  CHECK(accel_dataloader_set(held, "max_length", text));
  CHECK(accel_dataloader_set(held, "truncation", "true"));

  int64_t steps_per_epoch = 0;
  CHECK(accel_dataloader_batch_count(train, &steps_per_epoch));
  int64_t total_steps = steps_per_epoch * epochs;
  if (max_steps > 0 && max_steps < total_steps) total_steps = max_steps;
  accel_optimizer* opt = NULL;
  accel_scheduler* sched = NULL;
  CHECK(accel_optimizer_new(model, "adamw", &opt));
  snprintf(text, sizeof text, "%g", lr);
  CHECK(accel_optimizer_set(opt, "lr", text));
  CHECK(accel_optimizer_set(opt, "weight_decay", "0.01"));
  CHECK(accel_scheduler_new(opt, "cosine", &sched));
  /* The scheduler advances once per process per step (accel_scheduler_new): written for
   * total_steps * world. */
  snprintf(text, sizeof text, "%lld", (long long)(total_steps * world / 20));
  CHECK(accel_scheduler_set(sched, "warmup_steps", text));
  snprintf(text, sizeof text, "%lld", (long long)(total_steps * world));
  CHECK(accel_scheduler_set(sched, "total_steps", text));
  {
    void* objects[] = {model, opt, sched, train, held};
    CHECK(accel_prepare(acc, objects, 5));
  }
  char line[256];
  snprintf(line, sizeof line,
           "train_text: %lld train / %lld held-out entries, %d process(es), %lld parameters, "
           "%lld steps, batches %s",
           (long long)train_text.count, (long long)held_text.count, world, (long long)params,
           (long long)total_steps, grouping ? "grouped by length" : "in random order");
  CHECK(accel_log_message(acc, ACCEL_LOG_INFO, 0, line));
  {
    const char* keys[] = {"lr", "batch_size", "max_length", "processes"};
    const double hparams[] = {lr, batch, (double)max_length, world};
    accel_values* config = NULL;
    CHECK(accel_values_new(&config));
    for (size_t k = 0; k < 4; ++k) CHECK(accel_values_set_number(config, keys[k], hparams[k]));
    CHECK(accel_init_trackers(acc, "train_text", config));
    accel_values_free(config);
  }

  int64_t step = 0;
  double start = now(), tokens = 0, padded = 0;
  for (int e = 0; e < epochs && step < total_steps; ++e) {
    CHECK(accel_dataloader_set_epoch(train, e));
    CHECK(accel_model_train(model, true));
    for (; step < total_steps; ++step) {
      accel_tensor* fields[2];
      size_t n = 0;
      CHECK(accel_dataloader_next(train, fields, 2, &n));
      if (n == 0) break;
      int64_t shape[2], real = 0, count = 0;
      size_t dims = 0, size = 0;
      CHECK(accel_tensor_shape(fields[0], shape, 2, &dims));
      CHECK(accel_tensor_element_count(fields[1], &count));
      int64_t* mask = malloc((size_t)count * sizeof *mask);
      CHECK(accel_tensor_to_data(fields[1], mask, (size_t)count * sizeof *mask, &size));
      for (int64_t i = 0; i < count; ++i) real += mask[i];
      free(mask);
      tokens += (double)real;
      padded += (double)(shape[0] * shape[1]);
      accel_tensor* loss = call_one(model, "training_step", fields);
      CHECK(accel_backward(acc, loss));
      CHECK(accel_clip_grad_norm(acc, model, 1.0, 2.0, NULL));
      CHECK(accel_optimizer_step(opt));
      CHECK(accel_scheduler_step(sched));
      CHECK(accel_optimizer_zero_grad(opt));
      if (step % 10 == 0 || step + 1 == total_steps) {
        double value = 0, rate = 0;
        CHECK(accel_tensor_item_f64(loss, &value));
        CHECK(accel_scheduler_lr(sched, &rate));
        const double secs = now() - start;
        const char* keys[] = {"loss", "lr", "samples_per_s", "bytes_per_s"};
        const double logged[] = {value, rate, (double)(step + 1) * batch * world / secs,
                                 tokens * world / secs};
        log_numbers(acc, step, keys, logged, 4);
        if (step % 50 == 0 || step + 1 == total_steps) {
          snprintf(line, sizeof line,
                   "step %lld/%lld  loss %.3f  lr %.2e  %.0f bytes/s per process  %.0f%% padding",
                   (long long)step, (long long)total_steps, value, rate, tokens / secs,
                   100.0 * (1.0 - tokens / padded));
          CHECK(accel_log_message(acc, ACCEL_LOG_INFO, 0, line));
        }
      }
      accel_tensor_free(loss);
      accel_tensor_free(fields[0]);
      accel_tensor_free(fields[1]);
    }
  }
  const double secs = now() - start;
  const double ppl = held_out_perplexity(acc, model, held);
  snprintf(line, sizeof line,
           "held-out perplexity %.3f per byte after %lld steps (%.1f s, %.0f real bytes/s per "
           "process, %.0f%% of the batch was padding)",
           ppl, (long long)step, secs, tokens / secs, 100.0 * (1.0 - tokens / padded));
  CHECK(accel_print(acc, line));
  {
    /* A language model's accuracy: its held-out perplexity. */
    const char* keys[] = {"perplexity"};
    log_numbers(acc, step, keys, &ppl, 1);
  }
  CHECK(accel_end_training(acc));
  snprintf(text, sizeof text, "%lld", (long long)max_length);
  score_entries(acc, model, &held_text, text);

  CHECK(accel_wait_for_everyone(acc));
  accel_scheduler_free(sched);
  accel_optimizer_free(opt);
  accel_dataloader_free(train);
  accel_dataloader_free(held);
  accel_dataset_free(train_set);
  accel_dataset_free(held_set);
  accel_model_free(model);
  accel_accelerator_free(acc);
  for (int64_t i = 0; i < train_text.count; ++i) free(train_text.text[i]);
  for (int64_t i = 0; i < held_text.count; ++i) free(held_text.text[i]);
  free(train_text.text);
  free(train_text.length);
  free(held_text.text);
  free(held_text.length);
  return 0;
}
