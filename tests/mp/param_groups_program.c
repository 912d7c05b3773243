/*
 * param_groups_program.c - one rank of the optimizer parameter-group tests
 * (param_groups_mp_test.cpp), started by `accel launch`. An MLP with a LayerNorm trains with AdamW
 * in three parameter groups (group 0: fc1.weight, weight decay 0.1; group 1: the biases and the
 * LayerNorm, no weight decay; group 2: the head's weight, its own lr and beta1) under a linear
 * warmup, on a global batch of 8 rows a step split between the processes. Rank 0 prints every
 * parameter ("param NAME v1 v2 ...", 9 significant digits) and every group's rate ("lr G v").
 *
 *   train N          steps 0..N
 *   save DIR K N     steps 0..N, saving the state in DIR before step K
 *   load DIR K N     load DIR (saved before step K), then steps K..N
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { kIn = 8, kHidden = 16, kOut = 4, kBatch = 8 };

static const char* const kParams[] = {"fc1.weight", "fc1.bias",   "ln.weight",
                                      "ln.bias",    "fc2.weight", "fc2.bias"};

struct run {
  accel_accelerator* acc;
  accel_model* model;
  accel_optimizer* opt;
  accel_scheduler* sched;
  int32_t rank, world;
};

static void setup(struct run* r) {
  const char* no_decay[] = {"fc1.bias", "ln.weight", "ln.bias", "fc2.bias"};
  const char* head[] = {"fc2.weight"};
  void* objects[3];
  size_t group = 0;
  CHECK(accel_init(NULL, &r->acc));
  CHECK(accel_process_index(r->acc, &r->rank));
  CHECK(accel_num_processes(r->acc, &r->world));
  g_rank = r->rank;
  CHECK(accel_set_seed(r->acc, 3, false));
  CHECK(accel_model_new(&r->model));
  CHECK(accel_model_add_layer(r->model, "fc1", "linear", "in_features=8 out_features=16"));
  CHECK(accel_model_add_layer(r->model, "ln", "layer_norm", "normalized_shape=16"));
  CHECK(accel_model_add_layer(r->model, "fc2", "linear", "in_features=16 out_features=4"));
  CHECK(accel_model_define(r->model,
                           "def loss(self, x):\n"
                           "    h = torch.relu(self.ln.forward(self.fc1.forward(x)))\n"
                           "    return self.fc2.forward(h).pow(2).mean()\n"));
  CHECK(accel_optimizer_new(r->model, "adamw", &r->opt));
  CHECK(accel_optimizer_set(r->opt, "lr", "0.01"));
  CHECK(accel_optimizer_set(r->opt, "weight_decay", "0.1"));
  CHECK(accel_optimizer_add_group(r->opt, no_decay, 4, &group));
  CHECK(accel_optimizer_set_group(r->opt, group, "weight_decay", "0"));
  CHECK(accel_optimizer_add_group(r->opt, head, 1, &group));
  CHECK(accel_optimizer_set_group(r->opt, group, "lr", "0.03"));
  CHECK(accel_optimizer_set_group(r->opt, group, "beta1", "0.8"));
  CHECK(accel_scheduler_new(r->opt, "linear", &r->sched));
  CHECK(accel_scheduler_set(r->sched, "warmup_steps", "4"));
  CHECK(accel_scheduler_set(r->sched, "total_steps", "100"));
  objects[0] = r->model;
  objects[1] = r->opt;
  objects[2] = r->sched;
  CHECK(accel_prepare(r->acc, objects, 3));
}

/* Step `step` on this rank's rows of the global batch. */
static void train_step(struct run* r, int step) {
  const int rows = kBatch / r->world, first = r->rank * rows;
  float x[kBatch * kIn];
  int64_t shape[2];
  int i, j;
  accel_tensor* input = NULL;
  accel_tensor_list* outputs = NULL;
  accel_tensor* loss = NULL;
  for (i = 0; i < rows; ++i)
    for (j = 0; j < kIn; ++j)
      x[i * kIn + j] = (float)sin(0.37 * ((step * kBatch + first + i) * kIn + j));
  shape[0] = rows;
  shape[1] = kIn;
  CHECK(accel_tensor_from_data(x, (size_t)rows * kIn * sizeof(float), ACCEL_DTYPE_F32, shape, 2,
                               &input));
  CHECK(accel_model_call(r->model, "loss", (const accel_tensor* const*)&input, 1, &outputs));
  CHECK(accel_tensor_list_get(outputs, 0, &loss));
  CHECK(accel_backward(r->acc, loss));
  CHECK(accel_optimizer_step(r->opt));
  CHECK(accel_scheduler_step(r->sched));
  CHECK(accel_optimizer_zero_grad(r->opt));
  accel_tensor_free(loss);
  accel_tensor_list_free(outputs);
  accel_tensor_free(input);
}

static void print_results(struct run* r) {
  size_t i, g, count = 0, size = 0, n;
  float values[kHidden * kIn];
  double lr = 0;
  if (r->rank != 0) return;
  for (i = 0; i < sizeof kParams / sizeof kParams[0]; ++i) {
    accel_tensor* t = NULL;
    CHECK(accel_model_tensor(r->model, kParams[i], &t));
    CHECK(accel_tensor_to_data(t, values, sizeof values, &size));
    printf("param %s", kParams[i]);
    for (n = 0; n < size / sizeof(float); ++n) printf(" %.9g", (double)values[n]);
    printf("\n");
    accel_tensor_free(t);
  }
  CHECK(accel_optimizer_group_count(r->opt, &count));
  for (g = 0; g < count; ++g) {
    CHECK(accel_optimizer_group_lr(r->opt, g, &lr));
    printf("lr %zu %.17g\n", g, lr);
  }
}

int main(int argc, char** argv) {
  struct run r;
  const char* mode = argc > 1 ? argv[1] : "";
  const int train = strcmp(mode, "train") == 0;
  int step, first = 0, save_at = -1, total;
  if (!(train && argc == 3) && !((!strcmp(mode, "save") || !strcmp(mode, "load")) && argc == 5)) {
    fprintf(stderr, "usage: %s train N | save DIR K N | load DIR K N\n", argv[0]);
    return 64;
  }
  total = atoi(argv[argc - 1]);
  memset(&r, 0, sizeof r);
  setup(&r);
  if (!strcmp(mode, "save")) save_at = atoi(argv[3]);
  if (!strcmp(mode, "load")) {
    first = atoi(argv[3]);
    CHECK(accel_load_state(r.acc, argv[2]));
  }
  for (step = first; step < total; ++step) {
    if (step == save_at) CHECK(accel_save_state(r.acc, argv[2]));
    train_step(&r, step);
  }
  print_results(&r);
  CHECK(accel_wait_for_everyone(r.acc));
  accel_scheduler_free(r.sched);
  accel_optimizer_free(r.opt);
  accel_model_free(r.model);
  accel_accelerator_free(r.acc);
  return 0;
}
