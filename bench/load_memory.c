/*
 * load_memory.c - the memory and time of loading a safetensors checkpoint into an fp32 model that
 * is already built (LAYERS square linear layers of WIDTH; 16 x 4096: 1.07 GB), through the public
 * API. bench/load_memory.py writes the checkpoint with `write` and runs `load` on 1 process and
 * on 2 under ZeRO stage 3 with fsdp_cpu_ram_efficient_loading (set by the caller's environment),
 * beside PyTorch's torch.load + load_state_dict (bench/load_memory_ref.py).
 *
 *   load_memory write DIR LAYERS WIDTH            the model (seed 1) saved as DIR (one file)
 *   load_memory load DIR LAYERS WIDTH pretrained|checkpoint [empty]
 *   load_memory build LAYERS WIDTH                an empty build alone (accel_model_new_empty)
 *
 * `load` builds the model (seed 2), prepares it (under stage 3 each rank then keeps its own
 * parameters), resets the process's peak RSS (/proc/self/clear_refs 5), calls
 * accel_load_pretrained or accel_load_checkpoint_in_model, and prints one JSON line per rank.
 * With `empty` the model is built with accel_model_new_empty and not prepared (an empty model
 * cannot be: the load fills it first); build_seconds and rss_built_mb say what the build took:
 *
 *   BENCH {"rank":0,"rss_before_mb":...,"peak_mb":...,"rss_after_mb":...,"seconds":...}
 *
 * peak_mb is VmHWM after the reset: the largest resident size during the load call alone;
 * peak_mb - rss_before_mb is what the load added at its peak. `build` prints
 *
 *   BENCH {"layers":...,"width":...,"seconds":...,"rss_growth_mb":...}
 *
 * for Accelerate's test_init_empty_weights_very_large_model (1000 x 10000: 100 B parameters).
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

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "build")) return build_alone(atoi(argv[2]), atoi(argv[3]));
  if (argc < 5 || (strcmp(argv[1], "write") && argc != 6 && argc != 7)) {
    fprintf(stderr,
            "usage: load_memory write|load DIR LAYERS WIDTH [pretrained|checkpoint [empty]]\n"
            "       load_memory build LAYERS WIDTH\n");
    return 64;
  }
  const int empty = argc == 7 && !strcmp(argv[6], "empty");
  const char* dir = argv[2];
  const int layers = atoi(argv[3]), width = atoi(argv[4]);
  accel_accelerator* acc = NULL;
  int32_t rank = 0;
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_set_seed(acc, strcmp(argv[1], "write") ? 2 : 1, false));
  const double rss_start = status_mb("VmRSS"), t_build = mono();
  accel_model* model = build(layers, width, empty, 1);
  const double build_seconds = mono() - t_build, rss_built = status_mb("VmRSS") - rss_start;
  if (!strcmp(argv[1], "write")) {
    CHECK(accel_save_model(acc, model, dir, "100GB"));
  } else {
    void* objects[] = {model};
    if (!empty) CHECK(accel_prepare(acc, objects, 1));
    const double before = status_mb("VmRSS");
    if (reset_peak() != 0) {
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
