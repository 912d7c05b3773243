/*
 * each_node_program.c - the rank program of cluster_suite.py's save_on_each_node scenario: one rank
 * of a data-parallel job under `accel launch` (one or several machines). C99 on accel.h only.
 *
 *   each_node_program train STEPS
 *   each_node_program save DIR MODEL_DIR STEPS
 *   each_node_program resume DIR STEPS
 *   each_node_program model MODEL_DIR STEPS
 *
 * The objects: an MLP 8 -> 16 -> 3 with dropout (so that a resume depends on the random states),
 * Adam, a linear schedule, a shuffled dataloader of 96 generated samples in batches of 4, all
 * prepared. The environment chooses the rest (ACCEL_SAVE_ON_EACH_NODE, ACCELERATE_USE_DEEPSPEED
 * with ACCELERATE_DEEPSPEED_ZERO_STAGE, ...).
 *   train    STEPS optimizer steps, then "r<r> sum <hex>".
 *   save     STEPS steps, "r<r> sum <hex>", accel_save_state(DIR), "r<r> saved",
 *            accel_save_model(MODEL_DIR), "r<r> model saved".
 *   resume   accel_load_state(DIR), "r<r> loaded <hex>", STEPS more steps, "r<r> sum <hex>".
 *   model    STEPS steps, accel_save_model(MODEL_DIR), "r<r> model saved".
 * <hex> is FNV-1a 64 over every parameter's and buffer's name and bytes, in the model's order.
 * A failed call prints "r<r> error <STATUS_NAME> <status> <call>: <message>" on stderr and exits
 * with 1 (4 when a peer failed or timed out).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} Job;

static void build(Job* job) {
  static float x[kSamples * kFeatures];
  static int64_t y[kSamples];
  int64_t xs[2] = {kSamples, kFeatures}, ys[1] = {kSamples};
  accel_tensor *tx = NULL, *ty = NULL;
  const accel_tensor* fields[2];
  void* objects[4];
  int i;
  int32_t rank = 0;
  for (i = 0; i < kSamples * kFeatures; ++i) x[i] = (float)((i * 37 + 11) % 29) / 29.0f - 0.5f;
  for (i = 0; i < kSamples; ++i) y[i] = (i * 7) % kClasses;
  CHECK(accel_init(NULL, &job->acc));
  CHECK(accel_process_index(job->acc, &rank));
  g_rank = rank;
  CHECK(accel_set_seed(job->acc, 11, false));
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
  CHECK(accel_dataloader_set(job->dl, "seed", "3"));
  CHECK(accel_model_new(&job->model));
  CHECK(accel_model_add_layer(job->model, "fc1", "linear", "in_features=8 out_features=16"));
  CHECK(accel_model_add_layer(job->model, "fc2", "linear", "in_features=16 out_features=3"));
  CHECK(accel_model_define(
      job->model,
      "def training_step(self, x, y):\n"
      "    h = torch.dropout(torch.relu(self.fc1.forward(x)), 0.2, self.training)\n"
      "    return torch.cross_entropy_loss(self.fc2.forward(h), y)\n"));
  CHECK(accel_optimizer_new(job->model, "adam", &job->opt));
  CHECK(accel_optimizer_set(job->opt, "lr", "0.01"));
  CHECK(accel_scheduler_new(job->opt, "linear", &job->sched));
  CHECK(accel_scheduler_set(job->sched, "warmup_steps", "2"));
  CHECK(accel_scheduler_set(job->sched, "total_steps", "1000"));
  objects[0] = job->model;
  objects[1] = job->opt;
  objects[2] = job->sched;
  objects[3] = job->dl;
  CHECK(accel_prepare(job->acc, objects, 4));
}

static void train(Job* job, long steps) {
  long s;
  for (s = 0; s < steps; ++s) {
    accel_tensor* f[2] = {NULL, NULL};
    accel_tensor_list* outputs = NULL;
    accel_tensor* loss = NULL;
    size_t n = 0;
    CHECK(accel_dataloader_next(job->dl, f, 2, &n));
    if (n == 0) CHECK(accel_dataloader_next(job->dl, f, 2, &n));
    CHECK(accel_accumulate(job->acc));
    CHECK(
        accel_model_call(job->model, "training_step", (const accel_tensor* const*)f, 2, &outputs));
    CHECK(accel_tensor_list_get(outputs, 0, &loss));
    CHECK(accel_backward(job->acc, loss));
    CHECK(accel_optimizer_step(job->opt));
    CHECK(accel_scheduler_step(job->sched));
    CHECK(accel_optimizer_zero_grad(job->opt));
    accel_tensor_free(loss);
    accel_tensor_list_free(outputs);
    accel_tensor_free(f[0]);
    accel_tensor_free(f[1]);
  }
}

static void print_sum(const Job* job, const char* what) {
  uint64_t h = 1469598103934665603ULL;
  size_t count = 0, t, i;
  CHECK(accel_model_tensor_count(job->model, &count));
  for (t = 0; t < count; ++t) {
    char name[128];
    size_t len = 0, bytes = 0, got = 0;
    accel_tensor* p = NULL;
    unsigned char* buf;
    CHECK(accel_model_tensor_name(job->model, t, name, sizeof name, &len));
    CHECK(accel_model_tensor(job->model, name, &p));
    CHECK(accel_tensor_data_size(p, &bytes));
    buf = malloc(bytes ? bytes : 1);
    if (!buf) exit(1);
    CHECK(accel_tensor_to_data(p, buf, bytes, &got));
    accel_tensor_free(p);
    for (i = 0; i < len; ++i) h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    for (i = 0; i < bytes; ++i) h = (h ^ buf[i]) * 1099511628211ULL;
    free(buf);
  }
  say("%s %016llx", what, (unsigned long long)h);
}

static void free_job(Job* job) {
  accel_dataloader_free(job->dl);
  accel_dataset_free(job->ds);
  accel_scheduler_free(job->sched);
  accel_optimizer_free(job->opt);
  accel_model_free(job->model);
  accel_accelerator_free(job->acc);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  Job job;
  memset(&job, 0, sizeof job);
  if (strcmp(mode, "train") == 0 && argc == 3) {
    build(&job);
    train(&job, atol(argv[2]));
    print_sum(&job, "sum");
  } else if (strcmp(mode, "save") == 0 && argc == 5) {
    build(&job);
    train(&job, atol(argv[4]));
    print_sum(&job, "sum");
    CHECK(accel_save_state(job.acc, argv[2]));
    say("saved");
    CHECK(accel_save_model(job.acc, job.model, argv[3], NULL));
    say("model saved");
  } else if (strcmp(mode, "model") == 0 && argc == 4) {
    build(&job);
    train(&job, atol(argv[3]));
    CHECK(accel_save_model(job.acc, job.model, argv[2], NULL));
    say("model saved");
  } else if (strcmp(mode, "resume") == 0 && argc == 4) {
    build(&job);
    CHECK(accel_load_state(job.acc, argv[2]));
    print_sum(&job, "loaded");
    train(&job, atol(argv[3]));
    print_sum(&job, "sum");
  } else {
    fprintf(stderr,
            "usage: each_node_program train STEPS | save DIR MODEL_DIR STEPS | resume DIR STEPS | "
            "model MODEL_DIR STEPS\n");
    return 64;
  }
  CHECK(accel_wait_for_everyone(job.acc));
  free_job(&job);
  say("done");
  return 0;
}
