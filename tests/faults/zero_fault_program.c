/*
 * zero_fault_program.c - the rank program of fault group i (tests/faults/faults_zero.py): one rank
 * of a ZeRO job under `accel launch -n N`. C99 on accel.h only. Every line it prints is flushed at
 * once, so a driver reading its output through a pipe knows how far it got when it was killed.
 *
 *   zero_fault_program STAGE SEED PROJECT_DIR COMMAND...
 *
 *   STAGE        0, 1, 2 or 3: the program sets distributed_type DEEPSPEED and deepspeed_config
 *                {zero_stage: STAGE}; "env": it sets nothing, the environment chooses (Accelerate's
 *                launcher variables: ACCELERATE_USE_DEEPSPEED with ACCELERATE_DEEPSPEED_ZERO_STAGE,
 *                ACCELERATE_USE_FSDP with FSDP_*).
 *   SEED         the seed of the initial parameters, the dropout and the data order: another SEED
 *                is another run.
 *   PROJECT_DIR  project_dir, with automatic checkpoint naming (save:- and load:- use
 *                PROJECT_DIR/checkpoints/checkpoint_<n>); "sum" writes PROJECT_DIR/sum.
 *
 * The objects: an MLP 8 -> 16 -> 3 with dropout, Adam, a linear schedule, a shuffled dataloader
 * of 96 generated samples in batches of 4, and the step counter registered for checkpointing
 * (custom_0.bin holds it as decimal text), all prepared.
 *
 * Commands, run in order by every rank:
 *   train:N      N optimizer steps
 *   save:DIR     accel_save_state(DIR); save:- with NULL
 *   load:DIR     accel_load_state(DIR); load:- with NULL; answers "ok step=<k>", k the step counter
 *   resume       load:- when PROJECT_DIR/checkpoints holds a checkpoint_<n>, else "ok none"
 *   sum          FNV-1a 64 of PROJECT_DIR/sum/model.safetensors as accel_save_model writes the
 * whole model there (under stage 3 too): "ok <16 hex digits>"
 *
 * Lines on stdout:
 *   pid=<pid> rank=<r> ready
 *   r<r> released <k> of <n>     k of the model's n tensors refused by accel_model_tensor
 *                                (ACCEL_ERR_STATE): under ZeRO stage 3 those another rank owns
 *   r<r> <i> ok[ <value>]        command i (0-based) succeeded
 *   r<r> <i> err <status> <STATUS_NAME> <message>   it failed (the message on one line)
 *   r<r> hold <name>             the save is about to block at <name> (ZERO_FAULT_HOLD)
 *   r<r> done
 * A command failing with ACCEL_ERR_PEER_FAILED or ACCEL_ERR_TIMEOUT ends the program with 4 (a
 * rank is gone), any other failure is answered and the next command runs; setup failures print
 * "r<r> error <STATUS_NAME> <status> <call>: <message>" on stderr and exit with 1.
 */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "accel/accel.h"
#include "fault_lines.h"

enum { kClasses = 3, kSamples = 96, kFeatures = 8, kHidden = 16 };

typedef struct {
  accel_accelerator* acc;
  accel_model* model;
  accel_optimizer* opt;
  accel_scheduler* sched;
  accel_dataset* ds;
  accel_dataloader* dl;
  int64_t steps; /* optimizer steps done: registered for checkpointing */
} Job;

static const char* g_project = NULL;

/* ZERO_FAULT_HOLD (config.yaml, manifest.json or rename): from inside the save callback of the
 * ZERO_FAULT_HOLD_SAVE-th save (1 when unset), puts a FIFO under that name (for rename: an extra
 * entry, hold.fifo) into the checkpoint directory being written and says "hold <name>". The
 * library's open of config.yaml or manifest.json for writing, or the open of every entry for
 * reading that syncs the directory before its rename, then blocks for good: the process stops at
 * exactly that file until it is killed. */
static void hold_if_asked(void) {
  static long saves = 0;
  const char* hold = getenv("ZERO_FAULT_HOLD");
  const char* which = getenv("ZERO_FAULT_HOLD_SAVE");
  char dir[4096], path[8300];
  DIR* d;
  struct dirent* e;
  int found = 0;
  if (!hold || !*hold || !g_project || ++saves != (which ? atol(which) : 1)) return;
  snprintf(dir, sizeof dir, "%s/checkpoints", g_project);
  d = opendir(dir);
  if (!d) {
    say("hold failed: cannot list %s", dir);
    return;
  }
  while (!found && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len > 8 && strcmp(e->d_name + len - 8, ".partial") == 0) {
      snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name,
               strcmp(hold, "rename") == 0 ? "hold.fifo" : hold);
      found = 1;
    }
  }
  closedir(d);
  if (!found) {
    say("hold failed: no *.partial directory in %s", dir);
    return;
  }
  if (mkfifo(path, 0600) != 0) {
    say("hold failed: mkfifo %s", path);
    return;
  }
  say("hold %s", hold);
}

static int32_t save_steps(accel_state_writer* w, void* user) {
  char text[32];
  int n = snprintf(text, sizeof text, "%lld", (long long)((Job*)user)->steps);
  hold_if_asked();
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

/* Builds and prepares the objects on `job->acc`. */
static void build_objects(Job* job, unsigned long long seed) {
  static float x[kSamples * kFeatures];
  static int64_t y[kSamples];
  int64_t xs[2] = {kSamples, kFeatures}, ys[1] = {kSamples};
  accel_tensor *tx = NULL, *ty = NULL;
  const accel_tensor* fields[2];
  char spec[128], seed_text[32];
  void* objects[4];
  int i;
  for (i = 0; i < kSamples * kFeatures; ++i) x[i] = (float)((i * 37 + 11) % 29) / 29.0f - 0.5f;
  for (i = 0; i < kSamples; ++i) y[i] = (i * 7) % kClasses;
  snprintf(seed_text, sizeof seed_text, "%llu", seed + 2);
  CHECK(accel_set_seed(job->acc, seed, false));
  CHECK(accel_tensor_from_data(x, sizeof x, ACCEL_DTYPE_F32, xs, 2, &tx));
  CHECK(accel_tensor_from_data(y, sizeof y, ACCEL_DTYPE_I64, ys, 1, &ty));
  fields[0] = tx;
  fields[1] = ty;
  CHECK(accel_dataset_from_tensors(fields, 2, &job->ds));
  accel_tensor_free(tx);
  accel_tensor_free(ty);
  CHECK(accel_dataloader_new(job->acc, job->ds, &job->dl));
  CHECK(accel_dataloader_set(job->dl, "batch_size", "4"));
  CHECK(accel_dataloader_set(job->dl, "shuffle", "true"));
  CHECK(accel_dataloader_set(job->dl, "seed", seed_text));
  CHECK(accel_model_new(&job->model));
  snprintf(spec, sizeof spec, "in_features=%d out_features=%d", kFeatures, kHidden);
  CHECK(accel_model_add_layer(job->model, "fc1", "linear", spec));
  snprintf(spec, sizeof spec, "in_features=%d out_features=%d", kHidden, kClasses);
  CHECK(accel_model_add_layer(job->model, "fc2", "linear", spec));
  CHECK(accel_model_define(job->model,
                           "def training_step(self, x, y):\n"
                           "    h = torch.dropout(torch.relu(self.fc1.forward(x)), 0.1, "
                           "self.training)\n"
                           "    return torch.cross_entropy_loss(self.fc2.forward(h), y)\n"));
  CHECK(accel_optimizer_new(job->model, "adam", &job->opt));
  CHECK(accel_optimizer_set(job->opt, "lr", "0.01"));
  CHECK(accel_scheduler_new(job->opt, "linear", &job->sched));
  CHECK(accel_scheduler_set(job->sched, "warmup_steps", "2"));
  CHECK(accel_scheduler_set(job->sched, "total_steps", "1000"));
  CHECK(accel_register_for_checkpointing(job->acc, save_steps, load_steps, job, NULL));
  objects[0] = job->model;
  objects[1] = job->opt;
  objects[2] = job->sched;
  objects[3] = job->dl;
  CHECK(accel_prepare(job->acc, objects, 4));
}

/* One optimizer step on the next batch (the next epoch when one ends). */
static accel_status train_step(Job* job) {
  accel_tensor* f[2] = {NULL, NULL};
  accel_tensor_list* outputs = NULL;
  accel_tensor* loss = NULL;
  size_t n = 0;
  accel_status st;
#define TRY(call)                 \
  do {                            \
    st = (call);                  \
    if (st != ACCEL_OK) goto out; \
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

/* How many of the model's tensors accel_model_tensor refuses with ACCEL_ERR_STATE (stage 3
 * releases those another rank owns), and how many there are. */
static void probe_released(const accel_model* model, size_t* released, size_t* count) {
  size_t t;
  *released = 0;
  CHECK(accel_model_tensor_count(model, count));
  for (t = 0; t < *count; ++t) {
    char name[128];
    size_t len = 0;
    accel_tensor* p = NULL;
    accel_status st;
    CHECK(accel_model_tensor_name(model, t, name, sizeof name, &len));
    st = accel_model_tensor(model, name, &p);
    if (st == ACCEL_ERR_STATE)
      ++*released;
    else
      CHECK(st);
    accel_tensor_free(p);
  }
}

/* FNV-1a 64 of the whole model as accel_save_model writes it into PROJECT_DIR/sum. */
static accel_status model_sum(Job* job, const char* project, char* out, size_t size) {
  char dir[4096], path[4200];
  unsigned char buf[65536];
  uint64_t h = 1469598103934665603ULL;
  size_t got, i;
  FILE* f;
  accel_status st;
  snprintf(dir, sizeof dir, "%s/sum", project);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  st = accel_save_model(job->acc, job->model, dir, NULL);
  if (st != ACCEL_OK) return st;
  f = fopen(path, "rb");
  if (!f) {
    snprintf(out, size, "cannot read %s", path);
    return ACCEL_ERR_IO;
  }
  while ((got = fread(buf, 1, sizeof buf, f)) > 0)
    for (i = 0; i < got; ++i) h = (h ^ buf[i]) * 1099511628211ULL;
  fclose(f);
  snprintf(out, size, "%016llx", (unsigned long long)h);
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

/* Runs command `index`; answers one line. Returns the status. */
static accel_status run_command(Job* job, const char* project, int index, const char* cmd) {
  const char* colon = strchr(cmd, ':');
  const char* arg = colon ? colon + 1 : "";
  size_t name_len = colon ? (size_t)(colon - cmd) : strlen(cmd);
  char value[4096] = "";
  accel_status st = ACCEL_OK;
  if (name_len == 5 && strncmp(cmd, "train", 5) == 0) {
    long k = atol(arg), i;
    for (i = 0; i < k && st == ACCEL_OK; ++i) st = train_step(job);
  } else if (name_len == 4 && strncmp(cmd, "save", 4) == 0) {
    st = accel_save_state(job->acc, strcmp(arg, "-") == 0 ? NULL : arg);
  } else if ((name_len == 4 && strncmp(cmd, "load", 4) == 0) ||
             (name_len == 6 && strncmp(cmd, "resume", 6) == 0)) {
    if (cmd[0] == 'r' && !has_checkpoint(project)) {
      snprintf(value, sizeof value, "none");
    } else {
      st = accel_load_state(job->acc, cmd[0] == 'r' || strcmp(arg, "-") == 0 ? NULL : arg);
      snprintf(value, sizeof value, "step=%lld", (long long)job->steps);
    }
  } else if (name_len == 3 && strncmp(cmd, "sum", 3) == 0) {
    st = model_sum(job, project, value, sizeof value);
    if (st != ACCEL_OK && value[0]) {
      say("%d err %d %s %s", index, (int)st, accel_status_name(st), value);
      return st;
    }
  } else {
    say("%d err %d %s unknown command '%s'", index, (int)ACCEL_ERR_INVALID_ARGUMENT,
        accel_status_name(ACCEL_ERR_INVALID_ARGUMENT), cmd);
    return ACCEL_ERR_INVALID_ARGUMENT;
  }
  if (st != ACCEL_OK) {
    char msg[4096];
    last_message(msg, sizeof msg);
    say("%d err %d %s %s", index, (int)st, accel_status_name(st), msg);
  } else if (value[0]) {
    say("%d ok %s", index, value);
  } else {
    say("%d ok", index);
  }
  return st;
}

int main(int argc, char** argv) {
  const char* stage = argc > 1 ? argv[1] : "";
  const char* project = argc > 3 ? argv[3] : NULL;
  unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
  const char* rank_env = getenv("RANK");
  accel_config* cfg = NULL;
  Job job;
  size_t released = 0, count = 0;
  int i;
  if (!project ||
      !(strcmp(stage, "env") == 0 || (strlen(stage) == 1 && stage[0] >= '0' && stage[0] <= '3'))) {
    fprintf(stderr, "usage: zero_fault_program 0|1|2|3|env SEED PROJECT_DIR COMMAND...\n");
    return 64;
  }
  g_rank = rank_env ? atoi(rank_env) : 0;
  g_project = project;
  memset(&job, 0, sizeof job);
  mkdir(project, 0755);
  CHECK(accel_config_new(&cfg));
  CHECK(accel_config_set(cfg, "project_dir", project));
  CHECK(accel_config_set(cfg, "automatic_checkpoint_naming", "true"));
  if (strcmp(stage, "env") != 0) {
    char ds[64];
    snprintf(ds, sizeof ds, "{zero_stage: %s}", stage);
    CHECK(accel_config_set(cfg, "distributed_type", "DEEPSPEED"));
    CHECK(accel_config_set(cfg, "deepspeed_config", ds));
  }
  CHECK(accel_init(cfg, &job.acc));
  accel_config_free(cfg);
  {
    int32_t idx = 0;
    CHECK(accel_process_index(job.acc, &idx));
    g_rank = idx;
  }
  printf("pid=%ld rank=%d ready\n", (long)getpid(), g_rank);
  fflush(stdout);
  build_objects(&job, seed);
  probe_released(job.model, &released, &count);
  say("released %zu of %zu", released, count);
  for (i = 4; i < argc; ++i) {
    accel_status st = run_command(&job, project, i - 4, argv[i]);
    if (st == ACCEL_ERR_PEER_FAILED || st == ACCEL_ERR_TIMEOUT) return 4;
  }
  accel_dataloader_free(job.dl);
  accel_dataset_free(job.ds);
  accel_scheduler_free(job.sched);
  accel_optimizer_free(job.opt);
  accel_model_free(job.model);
  accel_accelerator_free(job.acc);
  say("done");
  return 0;
}
