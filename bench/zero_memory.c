/*
 * zero_memory.c - the memory of model states per rank under libaccel's ZeRO stages, through the
 * public API: an MLP of LAYERS square linear layers of WIDTH (16 x 2896: 134M parameters) and a
 * 10-class head, AdamW, batch 8 per rank of synthetic data. The stage comes from the
 * configuration as a user gives it (ACCELERATE_USE_DEEPSPEED and ACCELERATE_DEEPSPEED_ZERO_STAGE,
 * or a config file). Prints one JSON line per rank:
 *
 *   BENCH {"rank":0,"params":...,"rss_before_mb":...,"peak_mb":...,"samples_per_s":...}
 *
 * peak_mb - rss_before_mb is what the model, its gradients, the optimizer state and the training
 * steps added to the process at their peak (against VmRSS before the model existed); the
 * activations of a batch of 8 are negligible beside them. The peak is VmHWM less the part of
 * libaccel's shared-memory mappings that other ranks' resident sizes count too (their Rss - Pss
 * at the end: a page k processes map counts 1/k in each one's Pss): over shared memory each rank
 * maps every rank's gradient buckets, whose pages exist once however many processes touch them.
 * hwm_mb is VmHWM itself.
 * bench/zero_memory.py runs it beside PyTorch's DDP and ZeroRedundancyOptimizer.
 *
 *   accel launch -n 2 zero_memory [--steps 4] [--layers 8] [--width 4096]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define BATCH 8

/* A /proc/self/status field in kB, as MB. */
static double status_mb(const char* field) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  double kb = -1;
  const size_t n = strlen(field);
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') kb = atof(line + n + 1);
  fclose(f);
  return kb / 1024.0;
}

/* Rss - Pss of libaccel's mappings under /dev/shm, in MB: what other processes count too. */
static double shared_elsewhere_mb(void) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  double kb = 0;
  int ours = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f)) {
    if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ')) /* a mapping's first line */
      ours = strstr(line, "/dev/shm/accel-") != NULL;
    else if (ours && !strncmp(line, "Rss:", 4))
      kb += atof(line + 4);
    else if (ours && !strncmp(line, "Pss:", 4))
      kb -= atof(line + 4);
  }
  fclose(f);
  return kb / 1024.0;
}

/* "def training_step(self, x, labels):" through fc1..fcN with relu, then the head. */
static char* source_for(int layers) {
  const size_t cap = 256 + (size_t)layers * 64;
  char* s = malloc(cap);
  size_t used = (size_t)snprintf(s, cap, "def training_step(self, x, labels):\n");
  int i;
  for (i = 1; i <= layers; ++i)
    used += (size_t)snprintf(s + used, cap - used, "    x = torch.relu(self.fc%d.forward(x))\n", i);
  snprintf(s + used, cap - used,
           "    return torch.cross_entropy_loss(self.head.forward(x), labels)\n");
  return s;
}

int main(int argc, char** argv) {
  int steps = 4, layers = 16, width = 2896, i;
  int32_t rank = 0;
  int64_t params = 0, shape[2], labels[BATCH];
  accel_accelerator* acc = NULL;
  accel_model* model = NULL;
  accel_optimizer* opt = NULL;
  accel_tensor* inputs[2];
  char name[16], options[96];
  double before, start = 0;
  float* x;
  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
      layers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--width") && i + 1 < argc)
      width = atoi(argv[++i]);
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
              __FILE__);
      return 2;
    }
  }
  if (steps < 1 || layers < 1 || width < 16) {
    fprintf(stderr, "--steps and --layers must be positive, --width at least 16\n");
    return 2;
  }
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_set_seed(acc, 1234, false));
  before = status_mb("VmRSS");
  CHECK(accel_model_new(&model));
  for (i = 1; i <= layers; ++i) {
    snprintf(name, sizeof name, "fc%d", i);
    snprintf(options, sizeof options, "in_features=%d out_features=%d", width, width);
    CHECK(accel_model_add_layer(model, name, "linear", options));
  }
  snprintf(options, sizeof options, "in_features=%d out_features=10", width);
  CHECK(accel_model_add_layer(model, "head", "linear", options));
  {
    char* source = source_for(layers);
    CHECK(accel_model_define(model, source));
    free(source);
  }
  CHECK(accel_model_parameter_element_count(model, &params));
  CHECK(accel_optimizer_new(model, "adamw", &opt));
  {
    void* objects[2];
    objects[0] = model;
    objects[1] = opt;
    CHECK(accel_prepare(acc, objects, 2));
  }
  x = malloc((size_t)BATCH * (size_t)width * sizeof *x);
  srand(17u + (unsigned)rank);
  for (i = 0; i < BATCH * width; ++i) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (i = 0; i < BATCH; ++i) labels[i] = rand() % 10;
  shape[0] = BATCH;
  shape[1] = width;
  CHECK(accel_tensor_from_data(x, (size_t)BATCH * (size_t)width * sizeof *x, ACCEL_DTYPE_F32, shape,
                               2, &inputs[0]));
  CHECK(accel_tensor_from_data(labels, sizeof labels, ACCEL_DTYPE_I64, shape, 1, &inputs[1]));
  free(x);
  /* One warm-up step (the optimizer state is created at the first step), then `steps` timed. */
  for (i = -1; i < steps; ++i) {
    accel_tensor* loss;
    if (i == 0) start = mono();
    CHECK(accel_accumulate(acc));
    loss = call_one(model, "training_step", inputs, 2);
    CHECK(accel_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(loss);
  }
  {
    const double seconds = mono() - start, hwm = status_mb("VmHWM");
    const double peak = hwm - shared_elsewhere_mb();
    printf(
        "BENCH {\"rank\":%d,\"params\":%lld,\"steps\":%d,\"batch\":%d,\"rss_before_mb\":%.1f,"
        "\"peak_mb\":%.1f,\"hwm_mb\":%.1f,\"samples_per_s\":%.2f}\n",
        rank, (long long)params, steps, BATCH, before, peak, hwm, steps * BATCH / seconds);
  }
  fflush(stdout);
  CHECK(accel_wait_for_everyone(acc));
  accel_tensor_free(inputs[0]);
  accel_tensor_free(inputs[1]);
  accel_optimizer_free(opt);
  accel_model_free(model);
  accel_accelerator_free(acc);
  return 0;
}
