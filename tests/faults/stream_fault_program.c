/*
 * stream_fault_program.c - the rank program of fault group h (tests/faults/faults_stream.py): a
 * stream dataloader killed mid-epoch and resumed on another number of processes. C99 on accel.h
 * only. Every line it prints is flushed at once, so a driver reading its output through a pipe
 * knows how far it got when it was killed.
 *
 *   stream_fault_program PROJECT_DIR SOURCE N BATCH EPOCHS DISPATCH SPLIT DROP WORKERS WORK_MS
 *       One rank of a job started by `accel launch`. SOURCE "callback": a stream of N samples
 *       (accel_dataset_from_stream) whose one int64 field at position p of epoch e is
 *       e * 1000000 + p. SOURCE a file path: its lines (accel_dataset_from_text_lines), line p
 *       beginning with the decimal number p; the id of its sample is e * 1000000 + p with e the
 *       dataloader's epoch. A dataloader with batch_size BATCH, dispatch_batches DISPATCH,
 *       split_batches SPLIT, drop_last DROP (each 0 or 1) and num_workers WORKERS, prepared; a
 *       registered counter of the batches taken; checkpoints named automatically under
 *       PROJECT_DIR/checkpoints. When a checkpoint_<n> directory exists there at start,
 *       accel_load_state(acc, NULL) resumes from the one the library picks. Then batches until
 *       EPOCHS epochs are complete; after each, the ids of every rank's batch are gathered
 *       (padded across processes with -1, which is no id), WORK_MS milliseconds pass (a training
 *       step's work, so that a kill aimed at a step lands inside the epoch) and the state is saved.
 *       Lines on stdout, each prefixed with "r<rank> " except the first:
 *         pid=<pid> rank=<r> ready
 *         r<r> loading                       before accel_load_state
 *         r<r> loaded steps=<k> epoch=<e> samples=<c>   after it: the counter and the cursor
 *         r<r> step <k>                      before accel_dataloader_next (k batches taken so far)
 *         r0 batch <k> <id> <id> ...         rank 0: the global batch k, in rank order, before
 *                                            the save (so every batch of a checkpoint is printed)
 *         r<r> work <k>                      after the gather, before the WORK_MS of work
 *         r<r> epoch end <e>                 when an epoch ends (e: the next epoch)
 *         r<r> saving <k> / r<r> saved <k>   around accel_save_state, k = batches taken
 *         r<r> done
 *       A failing call prints "r<r> error <STATUS_NAME> <status> <call>: <message>" on stderr and
 *       exits with 4 (ACCEL_ERR_PEER_FAILED or ACCEL_ERR_TIMEOUT) or 1 (anything else).
 */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "fault_lines.h"

enum { kMaxRows = 4096 };

/* The stream of the callback source: N samples, each its id. */
static int32_t stream_sample(int64_t epoch, int64_t position, accel_sample* sample, void* user) {
  const int64_t n = *(const int64_t*)user;
  int64_t id = epoch * 1000000 + position;
  if (position >= n) return 1;
  return accel_sample_set_field(sample, 0, &id, sizeof id) == ACCEL_OK ? 0 : 2;
}

static int64_t g_steps = 0; /* batches taken: registered for checkpointing */

static int32_t save_steps(accel_state_writer* w, void* user) {
  char text[32];
  int n = snprintf(text, sizeof text, "%lld", (long long)g_steps);
  (void)user;
  return accel_state_writer_write(w, text, (size_t)n) == ACCEL_OK ? 0 : 1;
}

static int32_t load_steps(const void* data, size_t size, void* user) {
  char text[32];
  char* end = NULL;
  long long v;
  (void)user;
  if (size == 0 || size >= sizeof text) return 1;
  memcpy(text, data, size);
  text[size] = 0;
  v = strtoll(text, &end, 10);
  if (*end != 0 || v < 0) return 1;
  g_steps = v;
  return 0;
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

/* The ids of this rank's batch: the callback source's field, or the numbers the text lines begin
 * with (field 0: the bytes, padded; field 1: the lengths). Returns the number of rows. */
static int64_t batch_ids(accel_tensor* const* f, int text, int64_t epoch, int64_t* ids) {
  int64_t shape[2] = {0, 0};
  size_t dims = 0, got = 0;
  int64_t i;
  CHECK(accel_tensor_shape(f[0], shape, 2, &dims));
  if (shape[0] > kMaxRows) {
    fprintf(stderr, "r%d error: a batch of %lld rows\n", g_rank, (long long)shape[0]);
    exit(1);
  }
  if (!text) {
    CHECK(accel_tensor_to_data(f[0], ids, sizeof(int64_t) * kMaxRows, &got));
    return shape[0];
  } else {
    static unsigned char bytes[kMaxRows * 64];
    int64_t lengths[kMaxRows];
    const int64_t width = dims == 2 ? shape[1] : 0;
    if (width > 64) {
      fprintf(stderr, "r%d error: a line of %lld bytes\n", g_rank, (long long)width);
      exit(1);
    }
    CHECK(accel_tensor_to_data(f[0], bytes, sizeof bytes, &got));
    CHECK(accel_tensor_to_data(f[1], lengths, sizeof lengths, &got));
    for (i = 0; i < shape[0]; ++i) {
      const unsigned char* row = bytes + i * width;
      int64_t v = 0, k;
      for (k = 0; k < lengths[i] && row[k] >= '0' && row[k] <= '9'; ++k)
        v = v * 10 + (row[k] - '0');
      ids[i] = epoch * 1000000 + v;
    }
    return shape[0];
  }
}

int main(int argc, char** argv) {
  const char* project = argc > 1 ? argv[1] : NULL;
  const char* source = argc > 2 ? argv[2] : "";
  int64_t n = argc > 3 ? atoll(argv[3]) : 0;
  const char* batch = argc > 4 ? argv[4] : "";
  const long epochs = argc > 5 ? atol(argv[5]) : 0;
  const long work_ms = argc > 10 ? atol(argv[10]) : 0;
  const char* rank_env = getenv("RANK");
  const int text = strcmp(source, "callback") != 0;
  accel_config* cfg = NULL;
  accel_accelerator* acc = NULL;
  accel_dataset* ds = NULL;
  accel_dataloader* dl = NULL;
  static int64_t ids[kMaxRows];
  static int64_t all[kMaxRows];
  static char line[65536];
  void* objects[1];
  size_t fields = 0;
  if (argc != 11 || work_ms < 0 || n <= 0 || epochs <= 0 || n >= 1000000) {
    fprintf(stderr,
            "usage: stream_fault_program PROJECT_DIR callback|TEXT_FILE N BATCH EPOCHS DISPATCH "
            "SPLIT DROP WORKERS WORK_MS\n");
    return 64;
  }
  g_rank = rank_env ? atoi(rank_env) : 0;
  CHECK(accel_config_new(&cfg));
  CHECK(accel_config_set(cfg, "project_dir", project));
  CHECK(accel_config_set(cfg, "automatic_checkpoint_naming", "true"));
  CHECK(accel_init(cfg, &acc));
  accel_config_free(cfg);
  {
    int32_t idx = 0;
    CHECK(accel_process_index(acc, &idx));
    g_rank = idx;
  }
  printf("pid=%ld rank=%d ready\n", (long)getpid(), g_rank);
  fflush(stdout);
  if (text) {
    CHECK(accel_dataset_from_text_lines(source, &ds));
  } else {
    const accel_dtype dtypes[1] = {ACCEL_DTYPE_I64};
    const size_t dim_counts[1] = {0};
    CHECK(accel_dataset_from_stream(1, dtypes, dim_counts, NULL, stream_sample, &n, NULL, &ds));
  }
  CHECK(accel_dataloader_new(acc, ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", batch));
  CHECK(accel_dataloader_set(dl, "dispatch_batches", atoi(argv[6]) ? "true" : "false"));
  CHECK(accel_dataloader_set(dl, "split_batches", atoi(argv[7]) ? "true" : "false"));
  CHECK(accel_dataloader_set(dl, "drop_last", atoi(argv[8]) ? "true" : "false"));
  CHECK(accel_dataloader_set(dl, "num_workers", argv[9]));
  if (text) CHECK(accel_dataloader_set(dl, "mask", "lengths"));
  CHECK(accel_dataloader_field_count(dl, &fields));
  CHECK(accel_register_for_checkpointing(acc, save_steps, load_steps, NULL, NULL));
  objects[0] = dl;
  CHECK(accel_prepare(acc, objects, 1));
  if (has_checkpoint(project)) {
    int64_t e = 0, c = 0;
    say("loading");
    CHECK(accel_load_state(acc, NULL));
    CHECK(accel_dataloader_position(dl, &e, &c));
    say("loaded steps=%lld epoch=%lld samples=%lld", (long long)g_steps, (long long)e,
        (long long)c);
  }
  for (;;) {
    accel_tensor* f[2] = {NULL, NULL};
    accel_tensor *t = NULL, *padded = NULL, *gathered = NULL;
    size_t count = 0, got = 0;
    int64_t rows, epoch = 0, shape[1];
    say("step %lld", (long long)g_steps);
    CHECK(accel_dataloader_next(dl, f, 2, &count));
    CHECK(accel_dataloader_epoch(dl, &epoch));
    if (count == 0) {
      say("epoch end %lld", (long long)epoch);
      if (epoch >= epochs) break;
      continue;
    }
    rows = batch_ids(f, text, epoch, ids);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
    shape[0] = rows;
    CHECK(
        accel_tensor_from_data(ids, sizeof(int64_t) * (size_t)rows, ACCEL_DTYPE_I64, shape, 1, &t));
    CHECK(accel_pad_across_processes(acc, t, 0, -1.0, false, &padded));
    CHECK(accel_gather(acc, padded, &gathered));
    CHECK(accel_tensor_to_data(gathered, all, sizeof all, &got));
    accel_tensor_free(t);
    accel_tensor_free(padded);
    accel_tensor_free(gathered);
    if (g_rank == 0) {
      size_t i, used = (size_t)snprintf(line, sizeof line, "batch %lld", (long long)g_steps);
      for (i = 0; i < got / sizeof(int64_t) && used < sizeof line - 24; ++i)
        if (all[i] >= 0)
          used += (size_t)snprintf(line + used, sizeof line - used, " %lld", (long long)all[i]);
      say("%s", line);
    }
    say("work %lld", (long long)g_steps);
    {
      struct timespec ts;
      ts.tv_sec = work_ms / 1000;
      ts.tv_nsec = (work_ms % 1000) * 1000000L;
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    ++g_steps;
    say("saving %lld", (long long)g_steps);
    CHECK(accel_save_state(acc, NULL));
    say("saved %lld", (long long)g_steps);
  }
  CHECK(accel_wait_for_everyone(acc));
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  accel_accelerator_free(acc);
  say("done");
  return 0;
}
