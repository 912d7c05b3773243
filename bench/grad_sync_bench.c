/*
 * grad_sync_bench.c - the cost of data-parallel gradient synchronisation, through the public API.
 *
 * For MLPs of ~0.3M, ~10M and ~50M parameters (synthetic data, batch 32 per rank), times
 * forward + backward micro-steps with and without gradient synchronisation in the same process,
 * interleaved: gradient_accumulation_steps is 2, so every other accel_accumulate is a local
 * micro-step and the next one synchronises. Prints one JSON line per model on each rank:
 *
 *   BENCH {"model":"10M","params":10512394,"sync_ms":...,"local_ms":...,"buckets_bytes":...}
 *
 * bench/collectives_bench.cpp times the bare all-reduce of the same byte counts.
 *
 *   accel launch -n 2 grad_sync_bench [--steps 10] [--models 0.3M,10M,50M]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define BATCH 32
#define MAX_STEPS 200

struct shape {
  const char* name;
  int widths[6]; /* input, hidden..., 0-terminated; the output layer has 10 classes */
};

static const struct shape kShapes[] = {
    {"0.3M", {784, 256, 256, 0}},
    {"10M", {1024, 2048, 2048, 2048, 0}},
    {"50M", {4096, 4096, 4096, 4096, 0}},
};

static const char* kSource3 =
    "def training_step(self, x, labels):\n"
    "    x = torch.relu(self.fc1.forward(x))\n"
    "    x = torch.relu(self.fc2.forward(x))\n"
    "    return torch.cross_entropy_loss(self.fc3.forward(x), labels)\n";

static const char* kSource4 =
    "def training_step(self, x, labels):\n"
    "    x = torch.relu(self.fc1.forward(x))\n"
    "    x = torch.relu(self.fc2.forward(x))\n"
    "    x = torch.relu(self.fc3.forward(x))\n"
    "    return torch.cross_entropy_loss(self.fc4.forward(x), labels)\n";

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* values, int n) {
  qsort(values, (size_t)n, sizeof *values, by_value);
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

static void run_shape(accel_accelerator* acc, const struct shape* s, int steps, int rank) {
  accel_model* model = NULL;
  accel_tensor *inputs[2] = {NULL, NULL}, *loss = NULL;
  double sync_ms[MAX_STEPS], local_ms[MAX_STEPS];
  int layers = 0, i;
  int64_t params = 0, shape[2];
  float* x;
  int64_t labels[BATCH];
  char name[16], options[96];

  CHECK(accel_model_new(&model));
  while (s->widths[layers + 1] != 0) {
    snprintf(name, sizeof name, "fc%d", layers + 1);
    snprintf(options, sizeof options, "in_features=%d out_features=%d", s->widths[layers],
             s->widths[layers + 1]);
    CHECK(accel_model_add_layer(model, name, "linear", options));
    ++layers;
  }
  snprintf(name, sizeof name, "fc%d", layers + 1);
  snprintf(options, sizeof options, "in_features=%d out_features=10", s->widths[layers]);
  CHECK(accel_model_add_layer(model, name, "linear", options));
  CHECK(accel_model_define(model, layers + 1 == 3 ? kSource3 : kSource4));
  CHECK(accel_model_parameter_element_count(model, &params));
  {
    void* objects[1];
    objects[0] = model;
    CHECK(accel_prepare(acc, objects, 1));
  }

  /* Each rank its own data, as in data-parallel training. */
  x = malloc((size_t)BATCH * (size_t)s->widths[0] * sizeof *x);
  srand(17u + (unsigned)rank);
  for (i = 0; i < BATCH * s->widths[0]; ++i) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (i = 0; i < BATCH; ++i) labels[i] = rand() % 10;
  shape[0] = BATCH;
  shape[1] = s->widths[0];
  CHECK(accel_tensor_from_data(x, (size_t)BATCH * (size_t)s->widths[0] * sizeof *x, ACCEL_DTYPE_F32,
                               shape, 2, &inputs[0]));
  CHECK(accel_tensor_from_data(labels, sizeof labels, ACCEL_DTYPE_I64, shape, 1, &inputs[1]));
  free(x);

  /* Two warm-up pairs, then `steps` pairs of (local, synchronised) micro-steps. */
  for (i = -2; i < steps; ++i) {
    int k;
    for (k = 0; k < 2; ++k) {
      bool sync = false;
      const double t = mono();
      CHECK(accel_accumulate(acc));
      CHECK(accel_sync_gradients(acc, &sync));
      loss = call_one(model, "training_step", inputs, 2);
      CHECK(accel_backward(acc, loss));
      accel_tensor_free(loss);
      if (i >= 0) (sync ? sync_ms : local_ms)[i] = (mono() - t) * 1e3;
    }
  }
  printf(
      "BENCH {\"model\":\"%s\",\"rank\":%d,\"params\":%lld,\"grad_bytes\":%lld,"
      "\"steps\":%d,\"batch\":%d,\"sync_ms\":%.3f,\"local_ms\":%.3f}\n",
      s->name, rank, (long long)params, (long long)params * 4, steps, BATCH, median(sync_ms, steps),
      median(local_ms, steps));
  fflush(stdout);
  accel_tensor_free(inputs[0]);
  accel_tensor_free(inputs[1]);
  accel_model_free(model);
}

int main(int argc, char** argv) {
  const char* wanted = "0.3M,10M,50M";
  int steps = 10, i;
  int32_t rank = 0;
  size_t k;
  accel_config* cfg = NULL;
  accel_accelerator* acc = NULL;

  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--models") && i + 1 < argc)
      wanted = argv[++i];
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
              __FILE__);
      return 2;
    }
  }
  if (steps < 1 || steps > MAX_STEPS) {
    fprintf(stderr, "--steps must be between 1 and %d\n", MAX_STEPS);
    return 2;
  }
  CHECK(accel_config_new(&cfg));
  CHECK(accel_config_set(cfg, "gradient_accumulation_steps", "2"));
  CHECK(accel_init(cfg, &acc));
  accel_config_free(cfg);
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_set_seed(acc, 1234, false));
  for (k = 0; k < sizeof kShapes / sizeof kShapes[0]; ++k)
    if (strstr(wanted, kShapes[k].name)) run_shape(acc, &kShapes[k], steps, rank);
  CHECK(accel_wait_for_everyone(acc));
  accel_accelerator_free(acc);
  return 0;
}
