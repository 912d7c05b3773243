/*
 * load_memory.c - the memory and time of loading a safetensors checkpoint into an fp32 model that
 * is already built (LAYERS square linear layers of WIDTH; 16 x 4096: 1.07 GB), through the public
 * API. bench/load_memory.py writes the checkpoint with `write` and runs `load` on 1 process and
 * on 2 under ZeRO stage 3 with fsdp_cpu_ram_efficient_loading (set by the caller's environment),
 * beside PyTorch's torch.load + load_state_dict (bench/load_memory_ref.py).
 *
 *   load_memory write DIR LAYERS WIDTH            the model (seed 1) saved as DIR (one file)
 *   load_memory load DIR LAYERS WIDTH pretrained|checkpoint [empty|zero3]
 *   load_memory build LAYERS WIDTH                an empty build alone (accel_model_new_empty)
 *   load_memory dispatch DIR LAYERS WIDTH PERCENT an empty model dispatched (disk offload) with
 *                                                 PERCENT % of it as the cpu budget, then forwards
 *
 * `load` builds the model (seed 2), prepares it (under stage 3 each rank then keeps its own
 * parameters), resets the process's peak RSS (/proc/self/clear_refs 5), calls
 * accel_load_pretrained or accel_load_checkpoint_in_model, and prints one JSON line per rank.
 * With `empty` the model is built with accel_model_new_empty and not prepared (an empty model
 * cannot be: the load fills it first); build_seconds and rss_built_mb say what the build took.
 * With `zero3` (ZeRO stage 3 set by the caller) the model is built empty and prepared empty (each
 * rank allocates only its share), and the peak is reset before the build: peak_mb covers build,
 * prepare and load, and rss_before_mb is the process's resident size before the build:
 *
 *   BENCH {"rank":0,"rss_before_mb":...,"peak_mb":...,"rss_after_mb":...,"seconds":...}
 *
 * peak_mb is VmHWM after the reset: the largest resident size during the load call alone;
 * peak_mb - rss_before_mb is what the load added at its peak. `build` prints
 *
 *   BENCH {"layers":...,"width":...,"seconds":...,"rss_growth_mb":...}
 *
 * for Accelerate's test_init_empty_weights_very_large_model (1000 x 10000: 100 B parameters).
 * `dispatch` (accel_dispatch_model, max_memory=cpu:BUDGET,disk) runs one forward of a batch of 8,
 * resets the peak, runs a second and prints
 *
 *   BENCH {"dispatch_percent":...,"budget_mb":...,"largest_unit_mb":...,"activations_mb":...,
 *          "peak_anon_mb":...,"bound_mb":...,...}
 *
 * peak_anon_mb is VmHWM less RssFile and RssShmem (the kernel keeps no peak of RssAnon alone; the
 * checkpoint is read with pread, so its pages are not mapped); bound_mb is budget + largest unit +
 * activations + 64 MB, what the forward should stay under, the process's own memory included.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

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

/* Resets VmHWM to the current resident size (Linux 4.0 and later). */
static int reset_peak(void) {
  FILE* f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  const int ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static accel_model* build(int layers, int width, int empty, int forward) {
  accel_model* model = NULL;
  char name[32], options[96];
  if (empty)
    CHECK(accel_model_new_empty(false, &model));
  else
    CHECK(accel_model_new(&model));
  snprintf(options, sizeof options, "in_features=%d out_features=%d", width, width);
  for (int i = 0; i < layers; ++i) {
    snprintf(name, sizeof name, "l%d", i);
    CHECK(accel_model_add_layer(model, name, "linear", options));
  }
  if (!forward) return model;
  /* A forward through every layer: ZeRO stage 3 shards the parameters of a model it can follow. */
  char* source = malloc((size_t)layers * 40 + 64);
  strcpy(source, "def forward(self, x):\n");
  for (int i = 0; i < layers; ++i)
    sprintf(source + strlen(source), "    x = self.l%d.forward(x)\n", i);
  strcat(source, "    return x\n");
  CHECK(accel_model_define(model, source));
  free(source);
  return model;
}

/* The time and RSS of building an empty model of `layers` linear layers of `width`, layers alone
 * (as Accelerate's test: no forward). */
static int build_alone(int layers, int width) {
  const double before = status_mb("VmRSS"), t0 = mono();
  accel_model* model = build(layers, width, 1, 0);
  const double seconds = mono() - t0;
  printf("BENCH {\"layers\":%d,\"width\":%d,\"seconds\":%.3f,\"rss_growth_mb\":%.1f}\n", layers,
         width, seconds, status_mb("VmRSS") - before);
  accel_model_free(model);
  return 0;
}

/* One forward of a batch of 8 through `model`, the output freed. */
static void forward_once(accel_model* model, accel_tensor* x) {
  accel_tensor* y = call_one(model, "forward", &x, 1);
  accel_tensor_free(y);
}

static int dispatch_forward(const char* dir, int layers, int width, int percent) {
  const double layer = (double)width * width * 4 + (double)width * 4, mb = 1024.0 * 1024.0;
  const long long budget = (long long)(layer * layers * percent / 100);
  char options[96];
  snprintf(options, sizeof options, "max_memory=cpu:%lld,disk", budget);
  accel_model* model = build(layers, width, 1, 1);
  float* data = calloc((size_t)8 * width, sizeof(float));
  for (int i = 0; i < 8 * width; ++i) data[i] = (float)(i % 17) / 17.0f;
  const int64_t shape[2] = {8, width};
  accel_tensor* x = NULL;
  CHECK(accel_tensor_from_data(data, (size_t)8 * width * 4, ACCEL_DTYPE_F32, shape, 2, &x));
  free(data);
  const double t0 = mono();
  CHECK(accel_dispatch_model(model, dir, options));
  const double dispatch_seconds = mono() - t0, anon_dispatched = status_mb("RssAnon");
  forward_once(model, x); /* compiles the method */
  if (reset_peak() != 0) {
    fprintf(stderr, "cannot reset the peak RSS (/proc/self/clear_refs)\n");
    return 1;
  }
  const double t1 = mono();
  forward_once(model, x);
  const double seconds = mono() - t1;
  const double peak = status_mb("VmHWM") - status_mb("RssFile") - status_mb("RssShmem");
  const double activations = 2.0 * 8 * width * 4 / mb;
  printf(
      "BENCH {\"dispatch_percent\":%d,\"budget_mb\":%.1f,\"largest_unit_mb\":%.1f,"
      "\"activations_mb\":%.2f,\"peak_anon_mb\":%.1f,\"bound_mb\":%.1f,"
      "\"anon_after_dispatch_mb\":%.1f,\"dispatch_seconds\":%.3f,\"forward_seconds\":%.3f}\n",
      percent, budget / mb, layer / mb, activations, peak,
      budget / mb + layer / mb + activations + 64, anon_dispatched, dispatch_seconds, seconds);
  accel_tensor_free(x);
  accel_model_free(model);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "build")) return build_alone(atoi(argv[2]), atoi(argv[3]));
  if (argc == 6 && !strcmp(argv[1], "dispatch"))
    return dispatch_forward(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  if (argc < 5 || (strcmp(argv[1], "write") && argc != 6 && argc != 7)) {
    fprintf(stderr,
            "usage: load_memory write|load DIR LAYERS WIDTH [pretrained|checkpoint [empty]]\n"
            "       load_memory build LAYERS WIDTH\n"
            "       load_memory dispatch DIR LAYERS WIDTH PERCENT\n");
    return 64;
  }
  const int zero3 = argc == 7 && !strcmp(argv[6], "zero3");
  const int empty = zero3 || (argc == 7 && !strcmp(argv[6], "empty"));
  const char* dir = argv[2];
  const int layers = atoi(argv[3]), width = atoi(argv[4]);
  accel_accelerator* acc = NULL;
  int32_t rank = 0;
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_set_seed(acc, strcmp(argv[1], "write") ? 2 : 1, false));
  const double rss_start = status_mb("VmRSS");
  if (zero3 && reset_peak() != 0) {
    fprintf(stderr, "cannot reset the peak RSS (/proc/self/clear_refs)\n");
    return 1;
  }
  const double t_build = mono();
  accel_model* model = build(layers, width, empty, 1);
  const double build_seconds = mono() - t_build, rss_built = status_mb("VmRSS") - rss_start;
  if (!strcmp(argv[1], "write")) {
    CHECK(accel_save_model(acc, model, dir, "100GB"));
  } else {
    void* objects[] = {model};
    if (!empty || zero3) CHECK(accel_prepare(acc, objects, 1));
    const double before = zero3 ? rss_start : status_mb("VmRSS");
    if (!zero3 && reset_peak() != 0) {
      fprintf(stderr, "cannot reset the peak RSS (/proc/self/clear_refs)\n");
      return 1;
    }
    const double t0 = mono();
    if (!strcmp(argv[5], "pretrained"))
      CHECK(accel_load_pretrained(model, dir, "strict=true", NULL));
    else
      CHECK(accel_load_checkpoint_in_model(model, dir));
    const double seconds = mono() - t0;
    printf(
        "BENCH {\"rank\":%d,\"rss_before_mb\":%.1f,\"peak_mb\":%.1f,\"rss_after_mb\":%.1f,"
        "\"seconds\":%.3f,\"build_seconds\":%.3f,\"rss_built_mb\":%.1f}\n",
        rank, before, status_mb("VmHWM"), status_mb("VmRSS"), seconds, build_seconds, rss_built);
    fflush(stdout);
  }
  accel_model_free(model);
  CHECK(accel_wait_for_everyone(acc));
  accel_accelerator_free(acc);
  return 0;
}
