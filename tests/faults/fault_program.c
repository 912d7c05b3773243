/*
 * fault_program.c - the rank program of the fault-injection suite (tests/faults/fault_suite.py).
 * C99 on accel.h only. Every line it prints is flushed at once, so a driver reading its output
 * through a pipe knows how far it got when it was killed.
 *
 *   train STEPS SAVE_EVERY PROJECT_DIR [ROUNDS [KIND [MODEL]]]
 *       One rank of a data-parallel job (started by `accel launch`, or from the environment alone
 *       as torchrun starts ranks). An MLP (MODEL: wide, the default, or mlp16, mlp32; see
 *       kModels) with dropout on seeded, generated data; Adam; a linear schedule;
 *       a shuffled dataloader over a tensor dataset; the step counter registered for
 *       checkpointing; checkpoints named automatically under PROJECT_DIR/checkpoints
 *       (project_dir + automatic_checkpoint_naming). When a checkpoint_<n> directory exists there
 *       at start, accel_load_state(acc, NULL) resumes from whichever the library picks. After
 *       every step, ROUNDS (default 100) collective rounds ("collective"): KIND "mixed" (the
 *       default) is accel_reduce (f32 sum: the shared-memory transport when it is on) then
 *       accel_gather (Gloo) in every round, "reduce" only the reduce, "gather" only the gather.
 *       Lines on stdout, each prefixed with "r<rank> " except the first:
 *         pid=<pid> rank=<r> ready
 *         r<r> loading / r<r> loaded step=<k>      around accel_load_state
 *         r<r> step <n>                            before training step n (0-based)
 *         r<r> collective <n> / r<r> collectives done <n>   around the collective rounds
 *         r<r> saving <n> / r<r> saved <n>         around accel_save_state, n = steps done
 *         r<r> checksum <16 hex digits>            FNV-1a 64 of every parameter's and buffer's
 *                                                  bytes, in the model's order
 *         r<r> done
 *       A failing call prints "r<r> error <STATUS_NAME> <status> <call>: <message>" on stderr and
 *       exits with 4 (ACCEL_ERR_PEER_FAILED or ACCEL_ERR_TIMEOUT) or 1 (anything else).
 *       With FAULT_LOG_TEXT=<bytes> in the environment it also logs (faults_trackers.py): the
 *       trackers ACCEL_LOG_WITH names, under PROJECT_DIR/faults, and a custom tracker "custom"
 *       that appends "step <n> loss <loss> text <bytes>" lines with one write(2) each to
 *       PROJECT_DIR/custom-<pid>.log; after each step (and its save, if any) accel_log gets
 *       loss = 1/(n+1) and a text of that many bytes (tracker_text), then the rank prints
 *         r<r> logged <n>                          once accel_log returned for step n
 *
 *   repl
 *       One process (a world of one). Reads commands from stdin, one per line, and answers one
 *       line each on stdout: "ok", "ok <value>", or "err <status number> <message>" (the message
 *       on one line). SIGXFSZ is ignored, so that a write beyond RLIMIT_FSIZE fails with EFBIG.
 *         build MODEL OPT [PROJECT_DIR]  frees what was built and builds anew: accelerator (with
 *                                        project_dir and automatic naming when PROJECT_DIR is
 *                                        given), model mlp16|mlp32, optimizer sgd|adam, linear
 *                                        schedule, dataloader, a registered step counter; prepare
 *         train N                        N training steps
 *         save DIR | save -              accel_save_state (DIR, or NULL with "-")
 *         load DIR | load -              accel_load_state (DIR, or NULL with "-")
 *         fsize BYTES | fsize unlimited  the soft RLIMIT_FSIZE of this process
 *         sum                            "ok <checksum>" as in train mode
 *         quit                           "ok", then exits 0
 */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include "accel/accel.h"
#include "fault_lines.h"

/* ------------------------------------------------------------------------------------------------
 * The training objects, shared by train and repl
 * ---------------------------------------------------------------------------------------------- */

enum { kClasses = 3, kMaxSamples = 256, kMaxFeatures = 128 };

/* The models: mlp16 and mlp32 (8 -> 16|32 -> 3, batches of 4 of 96 samples) for the repl's
 * checkpoint cases; wide (128 -> 512 -> 3, batches of 32 of 256 samples: a training step of a
 * few milliseconds, so that a kill can land inside one) for train. */
typedef struct {
  const char* name;
  int features, hidden, samples;
  const char* batch;
} ModelKind;

static const ModelKind kModels[] = {
    {"mlp16", 8, 16, 96, "4"}, {"mlp32", 8, 32, 96, "4"}, {"wide", 128, 512, 256, "32"}};

typedef struct {
  accel_accelerator* acc;
  accel_model* model;
  accel_optimizer* opt;
  accel_scheduler* sched;
  accel_dataset* ds;
  accel_dataloader* dl;
  int64_t steps; /* optimizer steps done: registered for checkpointing */
} Job;

static int32_t save_steps(accel_state_writer* w, void* user) {
  char text[32];
  int n = snprintf(text, sizeof text, "%lld", (long long)((Job*)user)->steps);
  return accel_state_writer_write(w, text, (size_t)n) == ACCEL_OK ? 0 : 1;
}

static int32_t load_steps(const void* data, size_t size, void* user) {
  char text[32];
  char* end = NULL;
  long long v;
  if (size == 0 || size >= sizeof text) return 1;
  memcpy(text, data, size);
  text[size] = 0;
  v = strtoll(text, &end, 10);
  if (*end != 0 || v < 0) return 1;
  ((Job*)user)->steps = v;
  return 0;
}

/* Builds model, optimizer, scheduler and dataloader on `job->acc` and prepares them; returns the
 * failing status (the message is the thread's last error) or ACCEL_OK. */
static accel_status build_objects(Job* job, const char* model_kind, const char* opt_kind) {
  static float x[kMaxSamples * kMaxFeatures];
  static int64_t y[kMaxSamples];
  const ModelKind* m = NULL;
  int64_t xs[2], ys[1];
  accel_tensor *tx = NULL, *ty = NULL;
  const accel_tensor* fields[2];
  char spec[128];
  void* objects[4];
  accel_status st;
  size_t k;
  int i;
  for (k = 0; k < sizeof kModels / sizeof kModels[0]; ++k)
    if (strcmp(model_kind, kModels[k].name) == 0) m = &kModels[k];
  if (!m) return ACCEL_ERR_INVALID_ARGUMENT;
  xs[0] = ys[0] = m->samples;
  xs[1] = m->features;
  for (i = 0; i < m->samples * m->features; ++i) x[i] = (float)((i * 37 + 11) % 29) / 29.0f - 0.5f;
  for (i = 0; i < m->samples; ++i) y[i] = (i * 7) % kClasses;
#define TRY(call)                  \
  do {                             \
    st = (call);                   \
    if (st != ACCEL_OK) return st; \
  } while (0)
  TRY(accel_set_seed(job->acc, 5, false));
  TRY(accel_tensor_from_data(x, sizeof(float) * (size_t)(m->samples * m->features), ACCEL_DTYPE_F32,
                             xs, 2, &tx));
  TRY(accel_tensor_from_data(y, sizeof(int64_t) * (size_t)m->samples, ACCEL_DTYPE_I64, ys, 1, &ty));
  fields[0] = tx;
  fields[1] = ty;
  st = accel_dataset_from_tensors(fields, 2, &job->ds);
  accel_tensor_free(tx);
  accel_tensor_free(ty);
  if (st != ACCEL_OK) return st;
  TRY(accel_dataloader_new(job->acc, job->ds, &job->dl));
  TRY(accel_dataloader_set(job->dl, "batch_size", m->batch));
  TRY(accel_dataloader_set(job->dl, "shuffle", "true"));
  TRY(accel_dataloader_set(job->dl, "seed", "3"));
  TRY(accel_model_new(&job->model));
  snprintf(spec, sizeof spec, "in_features=%d out_features=%d", m->features, m->hidden);
  TRY(accel_model_add_layer(job->model, "fc1", "linear", spec));
  snprintf(spec, sizeof spec, "in_features=%d out_features=%d", m->hidden, kClasses);
  TRY(accel_model_add_layer(job->model, "fc2", "linear", spec));
  TRY(accel_model_define(
      job->model,
      "def training_step(self, x, y):\n"
      "    h = torch.dropout(torch.relu(self.fc1.forward(x)), 0.1, self.training)\n"
      "    return torch.cross_entropy_loss(self.fc2.forward(h), y)\n"));
  TRY(accel_optimizer_new(job->model, opt_kind, &job->opt));
  TRY(accel_optimizer_set(job->opt, "lr", "0.01"));
  TRY(accel_scheduler_new(job->opt, "linear", &job->sched));
  TRY(accel_scheduler_set(job->sched, "warmup_steps", "2"));
  TRY(accel_scheduler_set(job->sched, "total_steps", "1000"));
  TRY(accel_register_for_checkpointing(job->acc, save_steps, load_steps, job, NULL));
  objects[0] = job->model;
  objects[1] = job->opt;
  objects[2] = job->sched;
  objects[3] = job->dl;
  TRY(accel_prepare(job->acc, objects, 4));
#undef TRY
  return ACCEL_OK;
}

static void free_job(Job* job) {
  accel_dataloader_free(job->dl);
  accel_dataset_free(job->ds);
  accel_scheduler_free(job->sched);
  accel_optimizer_free(job->opt);
  accel_model_free(job->model);
  accel_accelerator_free(job->acc);
  memset(job, 0, sizeof *job);
}

/* One optimizer step on the next batch (the next epoch when one ends). */
static accel_status train_step(Job* job, const char** failed) {
  accel_tensor* f[2] = {NULL, NULL};
  accel_tensor_list* outputs = NULL;
  accel_tensor* loss = NULL;
  size_t n = 0;
  accel_status st;
#define TRY(call)         \
  do {                    \
    st = (call);          \
    if (st != ACCEL_OK) { \
      *failed = #call;    \
      goto out;           \
    }                     \
  } while (0)
  TRY(accel_dataloader_next(job->dl, f, 2, &n));
  if (n == 0) TRY(accel_dataloader_next(job->dl, f, 2, &n));
  TRY(accel_accumulate(job->acc));
  TRY(accel_model_call(job->model, "training_step", (const accel_tensor* const*)f, 2, &outputs));
  TRY(accel_tensor_list_get(outputs, 0, &loss));
  TRY(accel_backward(job->acc, loss));
  TRY(accel_optimizer_step(job->opt));
  TRY(accel_scheduler_step(job->sched));
  TRY(accel_optimizer_zero_grad(job->opt));
  ++job->steps;
#undef TRY
out:
  accel_tensor_free(loss);
  accel_tensor_list_free(outputs);
  accel_tensor_free(f[0]);
  accel_tensor_free(f[1]);
  return st;
}

/* FNV-1a 64 over every parameter's and buffer's bytes, in the model's order. */
static accel_status checksum(const accel_model* model, uint64_t* out) {
  uint64_t h = 1469598103934665603ULL;
  size_t count = 0, t, i;
  accel_status st = accel_model_tensor_count(model, &count);
  if (st != ACCEL_OK) return st;
  for (t = 0; t < count; ++t) {
    char name[128];
    size_t len = 0, bytes = 0, got = 0;
    accel_tensor* p = NULL;
    unsigned char* buf;
    if ((st = accel_model_tensor_name(model, t, name, sizeof name, &len)) != ACCEL_OK) return st;
    if ((st = accel_model_tensor(model, name, &p)) != ACCEL_OK) return st;
    if ((st = accel_tensor_data_size(p, &bytes)) != ACCEL_OK) {
      accel_tensor_free(p);
      return st;
    }
    buf = malloc(bytes ? bytes : 1);
    st = accel_tensor_to_data(p, buf, bytes, &got);
    accel_tensor_free(p);
    if (st != ACCEL_OK) {
      free(buf);
      return st;
    }
    for (i = 0; i < len; ++i) h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    for (i = 0; i < bytes; ++i) h = (h ^ buf[i]) * 1099511628211ULL;
    free(buf);
  }
  *out = h;
  return ACCEL_OK;
}

/* Whether PROJECT_DIR/checkpoints holds an entry named checkpoint_<digits>. */
static int has_checkpoint(const char* project) {
  char path[4096];
  DIR* d;
  struct dirent* e;
  int found = 0;
  snprintf(path, sizeof path, "%s/checkpoints", project);
  d = opendir(path);
  if (!d) return 0;
  while ((e = readdir(d)) != NULL) {
    const char* s = e->d_name;
    if (strncmp(s, "checkpoint_", 11) != 0 || !s[11]) continue;
    s += 11;
    while (*s >= '0' && *s <= '9') ++s;
    if (*s == 0) found = 1;
  }
  closedir(d);
  return found;
}

/* ------------------------------------------------------------------------------------------------
 * Trackers (FAULT_LOG_TEXT)
 * ---------------------------------------------------------------------------------------------- */

/* The text logged at step n: "<n>:" then letters, `bytes` in all (faults_trackers.py builds the
 * same). */
static void tracker_text(long long n, size_t bytes, char* out) {
  size_t i;
  int head = snprintf(out, bytes + 1, "%lld:", n);
  for (i = head < 0 ? 0 : (size_t)head; i < bytes; ++i)
    out[i] = (char)('a' + (n + (long long)i) % 26);
  out[bytes] = 0;
}

static int g_custom_fd = -1;

static int32_t custom_start(const char* project, const accel_values* config, void* user) {
  char path[4096];
  (void)project;
  (void)config;
  snprintf(path, sizeof path, "%s/custom-%ld.log", (const char*)user, (long)getpid());
  g_custom_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  return g_custom_fd >= 0 ? 0 : 1;
}

static int32_t custom_log(const accel_values* values, int64_t step, void* user) {
  double loss = 0;
  const char* text = "";
  size_t count = 0, i;
  char line[128];
  int n;
  (void)user;
  if (accel_values_count(values, &count) != ACCEL_OK) return 1;
  for (i = 0; i < count; ++i) {
    const char *key = NULL, *t = NULL;
    int32_t is_text = 0;
    double number = 0;
    if (accel_values_get(values, i, &key, &is_text, &number, &t) != ACCEL_OK) return 1;
    if (strcmp(key, "loss") == 0) loss = number;
    if (strcmp(key, "text") == 0) text = t;
  }
  n = snprintf(line, sizeof line, "step %lld loss %.17g text %zu\n", (long long)step, loss,
               strlen(text));
  return write(g_custom_fd, line, (size_t)n) == n ? 0 : 1;
}

static int32_t custom_finish(void* user) {
  (void)user;
  if (g_custom_fd >= 0) close(g_custom_fd);
  g_custom_fd = -1;
  return 0;
}

/* Starts the trackers when FAULT_LOG_TEXT asks; returns the text's size (0: no logging). */
static size_t start_trackers(Job* job, const char* project, const char* model_kind) {
  const char* bytes_text = getenv("FAULT_LOG_TEXT");
  accel_values* config = NULL;
  if (!bytes_text || atol(bytes_text) <= 0) return 0;
  CHECK(accel_add_tracker(job->acc, "custom", custom_start, custom_log, custom_finish,
                          (void*)project, NULL));
  CHECK(accel_values_new(&config));
  CHECK(accel_values_set_number(config, "lr", 0.01));
  CHECK(accel_values_set_text(config, "model", model_kind));
  CHECK(accel_init_trackers(job->acc, "faults", config));
  accel_values_free(config);
  return (size_t)atol(bytes_text);
}

static void log_step(Job* job, size_t text_bytes) {
  static char* text = NULL;
  accel_values* v = NULL;
  if (!text) text = malloc(text_bytes + 1);
  if (!text) {
    fprintf(stderr, "r%d error: no memory for a text of %zu bytes\n", g_rank, text_bytes);
    exit(1);
  }
  tracker_text((long long)job->steps, text_bytes, text);
  CHECK(accel_values_new(&v));
  CHECK(accel_values_set_number(v, "loss", 1.0 / (double)(job->steps + 1)));
  CHECK(accel_values_set_text(v, "text", text));
  CHECK(accel_log(job->acc, v, job->steps));
  accel_values_free(v);
  say("logged %lld", (long long)job->steps);
}

/* ------------------------------------------------------------------------------------------------
 * train
 * ---------------------------------------------------------------------------------------------- */

static int run_train(int argc, char** argv) {
  const long steps = argc > 2 ? atol(argv[2]) : 12;
  const long save_every = argc > 3 ? atol(argv[3]) : 2;
  const char* project = argc > 4 ? argv[4] : NULL;
  const long rounds = argc > 5 ? atol(argv[5]) : 100;
  const char* kind = argc > 6 ? argv[6] : "mixed";
  const char* model_kind = argc > 7 ? argv[7] : "wide";
  const int do_reduce = strcmp(kind, "gather") != 0, do_gather = strcmp(kind, "reduce") != 0;
  const char* rank_env = getenv("RANK");
  accel_config* cfg = NULL;
  Job job;
  uint64_t sum = 0;
  float red[64];
  float gat[4];
  int64_t red_shape[1] = {64}, gat_shape[1] = {4};
  accel_tensor *tr = NULL, *tg = NULL;
  size_t text_bytes;
  int i;
  if (!project || steps < 0 || save_every <= 0 || rounds < 0 ||
      (strcmp(kind, "mixed") != 0 && strcmp(kind, "reduce") != 0 && strcmp(kind, "gather") != 0)) {
    fprintf(stderr,
            "usage: fault_program train STEPS SAVE_EVERY PROJECT_DIR [ROUNDS [mixed|reduce|gather "
            "[MODEL]]]\n");
    return 64;
  }
  g_rank = rank_env ? atoi(rank_env) : 0;
  memset(&job, 0, sizeof job);
  CHECK(accel_config_new(&cfg));
  CHECK(accel_config_set(cfg, "project_dir", project));
  CHECK(accel_config_set(cfg, "automatic_checkpoint_naming", "true"));
  CHECK(accel_init(cfg, &job.acc));
  accel_config_free(cfg);
  {
    int32_t idx = 0;
    CHECK(accel_process_index(job.acc, &idx));
    g_rank = idx;
  }
  printf("pid=%ld rank=%d ready\n", (long)getpid(), g_rank);
  fflush(stdout);
  CHECK(build_objects(&job, model_kind, "adam"));
  if (has_checkpoint(project)) {
    say("loading");
    CHECK(accel_load_state(job.acc, NULL));
    say("loaded step=%lld", (long long)job.steps);
  }
  text_bytes = start_trackers(&job, project, model_kind);
  for (i = 0; i < 64; ++i) red[i] = (float)(i + g_rank);
  for (i = 0; i < 4; ++i) gat[i] = (float)(g_rank * 10 + i);
  CHECK(accel_tensor_from_data(red, sizeof red, ACCEL_DTYPE_F32, red_shape, 1, &tr));
  CHECK(accel_tensor_from_data(gat, sizeof gat, ACCEL_DTYPE_F32, gat_shape, 1, &tg));
  while (job.steps < steps) {
    const char* failed = "";
    accel_status st;
    long r;
    say("step %lld", (long long)job.steps);
    st = train_step(&job, &failed);
    if (st != ACCEL_OK) {
      report(failed, st);
      exit(st == ACCEL_ERR_PEER_FAILED || st == ACCEL_ERR_TIMEOUT ? 4 : 1);
    }
    say("collective %lld", (long long)job.steps);
    for (r = 0; r < rounds; ++r) {
      accel_tensor* out = NULL;
      if (do_reduce) {
        CHECK(accel_reduce(job.acc, tr, ACCEL_REDUCE_SUM, &out));
        accel_tensor_free(out);
        out = NULL;
      }
      if (do_gather) {
        CHECK(accel_gather(job.acc, tg, &out));
        accel_tensor_free(out);
      }
    }
    say("collectives done %lld", (long long)job.steps);
    if (job.steps % save_every == 0) {
      say("saving %lld", (long long)job.steps);
      CHECK(accel_save_state(job.acc, NULL));
      say("saved %lld", (long long)job.steps);
    }
    if (text_bytes) log_step(&job, text_bytes);
  }
  if (text_bytes) CHECK(accel_end_training(job.acc));
  CHECK(checksum(job.model, &sum));
  say("checksum %016llx", (unsigned long long)sum);
  CHECK(accel_wait_for_everyone(job.acc));
  accel_tensor_free(tr);
  accel_tensor_free(tg);
  free_job(&job);
  say("done");
  return 0;
}

/* ------------------------------------------------------------------------------------------------
 * repl
 * ---------------------------------------------------------------------------------------------- */

static void answer_err(accel_status st) {
  char msg[4096];
  size_t i;
  snprintf(msg, sizeof msg, "%s", accel_last_error_message());
  for (i = 0; msg[i]; ++i)
    if (msg[i] == '\n' || msg[i] == '\r') msg[i] = ' ';
  printf("err %d %s\n", (int)st, msg);
  fflush(stdout);
}

static void answer(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

static int run_repl(void) {
  Job job;
  char line[8192];
  memset(&job, 0, sizeof job);
  signal(SIGXFSZ, SIG_IGN);
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32] = "", a[4096] = "", b[64] = "", c[4096] = "";
    size_t len = strlen(line);
    int n;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    n = sscanf(line, "%31s %4095s %63s %4095s", cmd, a, b, c);
    if (n < 1) {
      answer("err %d empty command", (int)ACCEL_ERR_INVALID_ARGUMENT);
      continue;
    }
    if (strcmp(cmd, "quit") == 0) {
      answer("ok");
      break;
    } else if (strcmp(cmd, "build") == 0) {
      accel_config* cfg = NULL;
      accel_status st;
      if (n < 3) {
        answer("err %d usage: build MODEL OPT [PROJECT_DIR]", (int)ACCEL_ERR_INVALID_ARGUMENT);
        continue;
      }
      free_job(&job);
      st = accel_config_new(&cfg);
      if (st == ACCEL_OK && n >= 4) st = accel_config_set(cfg, "project_dir", c);
      if (st == ACCEL_OK && n >= 4)
        st = accel_config_set(cfg, "automatic_checkpoint_naming", "true");
      if (st == ACCEL_OK) st = accel_init(cfg, &job.acc);
      accel_config_free(cfg);
      if (st == ACCEL_OK) st = build_objects(&job, a, b);
      if (st != ACCEL_OK) {
        answer_err(st);
        free_job(&job);
      } else {
        answer("ok");
      }
    } else if (!job.acc) {
      answer("err %d nothing built yet", (int)ACCEL_ERR_STATE);
    } else if (strcmp(cmd, "train") == 0) {
      long k = n >= 2 ? atol(a) : 1, i;
      accel_status st = ACCEL_OK;
      const char* failed = "";
      for (i = 0; i < k && st == ACCEL_OK; ++i) st = train_step(&job, &failed);
      if (st != ACCEL_OK)
        answer_err(st);
      else
        answer("ok");
    } else if (strcmp(cmd, "save") == 0 || strcmp(cmd, "load") == 0) {
      const char* dir = n >= 2 && strcmp(a, "-") != 0 ? a : NULL;
      accel_status st =
          cmd[0] == 's' ? accel_save_state(job.acc, dir) : accel_load_state(job.acc, dir);
      if (st != ACCEL_OK)
        answer_err(st);
      else
        answer("ok");
    } else if (strcmp(cmd, "fsize") == 0) {
      struct rlimit rl;
      if (getrlimit(RLIMIT_FSIZE, &rl) != 0) {
        answer("err %d getrlimit failed", (int)ACCEL_ERR_INTERNAL);
        continue;
      }
      rl.rlim_cur = strcmp(a, "unlimited") == 0 ? rl.rlim_max : (rlim_t)strtoull(a, NULL, 10);
      if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        answer("err %d setrlimit failed", (int)ACCEL_ERR_INTERNAL);
      else
        answer("ok");
    } else if (strcmp(cmd, "sum") == 0) {
      uint64_t s = 0;
      accel_status st = checksum(job.model, &s);
      if (st != ACCEL_OK)
        answer_err(st);
      else
        answer("ok %016llx", (unsigned long long)s);
    } else {
      answer("err %d unknown command %s", (int)ACCEL_ERR_INVALID_ARGUMENT, cmd);
    }
  }
  free_job(&job);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "train") == 0) return run_train(argc, argv);
  if (strcmp(mode, "repl") == 0) return run_repl();
  fprintf(stderr,
          "usage: fault_program train STEPS SAVE_EVERY PROJECT_DIR [ROUNDS [mixed|reduce|gather "
          "[MODEL]]] | repl\n");
  return 64;
}
