/*
 * train_bench.c - libaccel's side of bench/run.py: trains the MLP 784-256-256-10 or the CNN of
 * examples/c/train_fashion_mnist.c on Fashion-MNIST (AdamW, lr 1e-3, fp32) for a fixed number of
 * timed steps after a warm-up, and prints one JSON line per rank:
 *
 *   BENCH {"rank":0,"world":2,"samples_per_s":...,"main_wall":...,"first_step_wall":...,...}
 *
 * Wall-clock stamps are CLOCK_REALTIME seconds, so the caller can subtract the time it started the
 * launcher. bench/train_ref.py is the same program in PyTorch.
 *
 *   accel launch -n 2 train_bench --model mlp --steps 300 --warmup 30 --threads 1
 *
 * With --log-every-step each step also reads its loss and logs loss, lr and samples/s to the
 * trackers the configuration names (bench/tracking_overhead.sh sets ACCEL_LOG_WITH=all) and one
 * debug message through the logger (below the default level: the cost of a dropped message).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_util.h"

/* The inputs are the raw uint8 images; both implementations normalise inside the forward. */
static const char* kMlpSource =
    "def forward(self, images):\n"
    "    x = images.float().div(255.0).sub(0.2860).div(0.3530).flatten(1)\n"
    "    x = torch.relu(self.fc1.forward(x))\n"
    "    x = torch.relu(self.fc2.forward(x))\n"
    "    return self.fc3.forward(x)\n"
    "\n"
    "def training_step(self, images, labels):\n"
    "    return torch.cross_entropy_loss(self.forward(images), labels.long())\n";

static const char* kCnnSource =
    "def forward(self, images):\n"
    "    x = images.float().div(255.0).sub(0.2860).div(0.3530).unsqueeze(1)\n"
    "    x = torch.relu(self.conv1.forward(x))\n"
    "    x = torch.relu(self.conv2.forward(x))\n"
    "    x = torch.max_pool2d(x, [2, 2])\n"
    "    x = torch.dropout(x, 0.25, self.training)\n"
    "    x = torch.flatten(x, 1)\n"
    "    x = torch.relu(self.fc1.forward(x))\n"
    "    x = torch.dropout(x, 0.5, self.training)\n"
    "    return self.fc2.forward(x)\n"
    "\n"
    "def training_step(self, images, labels):\n"
    "    return torch.cross_entropy_loss(self.forward(images), labels.long())\n";

/* The BLAS library this process mapped, so the report can show both sides use the same one. */
static void mapped_blas(char* out, size_t size) {
  char line[1024];
  FILE* maps = fopen("/proc/self/maps", "r");
  /* No libblas mapped: the LibTorch carries its own (the PyPI wheels: MKL in libtorch_cpu.so). */
  snprintf(out, size, "none mapped (LibTorch's own)");
  if (!maps) return;
  while (fgets(line, sizeof line, maps)) {
    char* path = strchr(line, '/');
    if (path && (strstr(path, "libblas") || strstr(path, "libopenblas"))) {
      path[strcspn(path, "\n")] = '\0';
      snprintf(out, size, "%s", path);
      break;
    }
  }
  fclose(maps);
}

/* The resident set at the end, split as /proc/self/status does: anonymous memory (this process's
 * own), file pages (the shared libraries' code, and the datasets' decoded copies, shared with other
 * processes) and shmem; then proportionally (/proc/self/smaps_rollup): a page N processes share
 * counts 1/N in each. Order: rss anon, file, shmem, pss, pss anon, file, shmem (KiB, -1 unknown). */
static void resident_split(long kb[7]) {
  static const char* const keys[7] = {"RssAnon:", "RssFile:",  "RssShmem:", "Pss:",
                                      "Pss_Anon:", "Pss_File:", "Pss_Shmem:"};
  const char* const files[2] = {"/proc/self/status", "/proc/self/smaps_rollup"};
  char line[256];
  int f, k;
  for (k = 0; k < 7; ++k) kb[k] = -1;
  for (f = 0; f < 2; ++f) {
    FILE* in = fopen(files[f], "r");
    if (!in) continue;
    while (fgets(line, sizeof line, in))
      for (k = f == 0 ? 0 : 3; k < (f == 0 ? 3 : 7); ++k)
        if (!strncmp(line, keys[k], strlen(keys[k]))) kb[k] = atol(line + strlen(keys[k]));
    fclose(in);
  }
}

static accel_model* build_model(const char* name) {
  accel_model* model = NULL;
  CHECK(accel_model_new(&model));
  if (!strcmp(name, "mlp")) {
    CHECK(accel_model_add_layer(model, "fc1", "linear", "in_features=784 out_features=256"));
    CHECK(accel_model_add_layer(model, "fc2", "linear", "in_features=256 out_features=256"));
    CHECK(accel_model_add_layer(model, "fc3", "linear", "in_features=256 out_features=10"));
    CHECK(accel_model_define(model, kMlpSource));
  } else if (!strcmp(name, "cnn")) {
    CHECK(accel_model_add_layer(model, "conv1", "conv2d",
                                "in_channels=1 out_channels=32 kernel_size=3"));
    CHECK(accel_model_add_layer(model, "conv2", "conv2d",
                                "in_channels=32 out_channels=64 kernel_size=3"));
    CHECK(accel_model_add_layer(model, "fc1", "linear", "in_features=9216 out_features=128"));
    CHECK(accel_model_add_layer(model, "fc2", "linear", "in_features=128 out_features=10"));
    CHECK(accel_model_define(model, kCnnSource));
  } else {
    fprintf(stderr, "unknown model %s (mlp or cnn)\n", name);
    exit(2);
  }
  return model;
}

/* What a training loop that logs every step does: reads the loss, logs it with the learning rate
 * and the throughput, and sends a debug message the default level drops. */
static void log_step(accel_accelerator* acc, accel_optimizer* opt, accel_tensor* loss, int64_t step,
                     double samples_per_s) {
  accel_values* values = NULL;
  double number = 0;
  CHECK(accel_values_new(&values));
  CHECK(accel_tensor_item_f64(loss, &number));
  CHECK(accel_values_set_number(values, "loss", number));
  CHECK(accel_optimizer_lr(opt, &number));
  CHECK(accel_values_set_number(values, "lr", number));
  CHECK(accel_values_set_number(values, "samples_per_s", samples_per_s));
  CHECK(accel_log(acc, values, step));
  CHECK(accel_log_message(acc, ACCEL_LOG_DEBUG, 0, "step logged"));
  accel_values_free(values);
}

int main(int argc, char** argv) {
  const double main_wall = wall();
  const char* model_name = "mlp";
  const char* data = "/usr/share/datasets/fashion-mnist";
  int steps = 300, warmup = 30, threads = 1, batch = 64, log_every_step = 0, i;
  int32_t world = 1, rank = 0;
  char text[64], blas[512], images[512], labels[512];
  const char* paths[2];
  accel_config* cfg = NULL;
  accel_accelerator* acc = NULL;
  accel_model* model = NULL;
  accel_optimizer* opt = NULL;
  accel_dataset* train_set = NULL;
  accel_dataloader* train = NULL;
  double init_wall, data_wall, first_step_wall = 0, start = 0, elapsed, logging = 0;
  long kb[7];
  struct rusage usage;

  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc)
      model_name = argv[++i];
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
      warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc)
      data = argv[++i];
    else if (!strcmp(argv[i], "--log-every-step"))
      log_every_step = 1;
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
              __FILE__);
      return 2;
    }
  }
  if (steps < 1 || warmup < 1 || threads < 1 || batch < 1) {
    fprintf(stderr, "--steps, --warmup, --threads and --batch-size must be at least 1\n");
    return 2;
  }

  CHECK(accel_config_new(&cfg));
  snprintf(text, sizeof text, "%d", threads);
  CHECK(accel_config_set(cfg, "num_threads", text));
  CHECK(accel_init(cfg, &acc));
  accel_config_free(cfg);
  CHECK(accel_num_processes(acc, &world));
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_set_seed(acc, 1234, false));
  init_wall = wall();

  model = build_model(model_name);
  snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", data);
  snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", data);
  paths[0] = images;
  paths[1] = labels;
  CHECK(accel_dataset_from_idx(paths, 2, &train_set));
  CHECK(accel_dataloader_new(acc, train_set, &train));
  snprintf(text, sizeof text, "%d", batch);
  CHECK(accel_dataloader_set(train, "batch_size", text));
  CHECK(accel_dataloader_set(train, "shuffle", "true"));
  CHECK(accel_dataloader_set(train, "drop_last", "true"));
  CHECK(accel_optimizer_new(model, "adamw", &opt));
  CHECK(accel_optimizer_set(opt, "lr", "1e-3"));
  {
    void* objects[3];
    objects[0] = model;
    objects[1] = opt;
    objects[2] = train;
    CHECK(accel_prepare(acc, objects, 3));
  }
  CHECK(accel_model_train(model, true));
  if (log_every_step) CHECK(accel_init_trackers(acc, "train_bench", NULL));
  data_wall = wall();

  for (i = 0; i < warmup + steps;) {
    accel_tensor* fields[2];
    accel_tensor* loss = NULL;
    size_t n = 0;
    CHECK(accel_dataloader_next(train, fields, 2, &n));
    if (n == 0) continue; /* the epoch ended: the loader starts the next one */
    loss = call_one(model, "training_step", fields, 2);
    CHECK(accel_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_optimizer_zero_grad(opt));
    if (log_every_step) {
      const double before = mono();
      log_step(acc, opt, loss, i, start > 0 ? (double)(i - warmup) * batch / (before - start) : 0);
      if (start > 0) logging += mono() - before; /* the timed steps' share */
    }
    accel_tensor_free(loss);
    accel_tensor_free(fields[0]);
    accel_tensor_free(fields[1]);
    ++i;
    if (i == 1) first_step_wall = wall();
    if (i == warmup) start = mono();
  }
  elapsed = mono() - start;
  if (log_every_step) CHECK(accel_end_training(acc));
  CHECK(accel_wait_for_everyone(acc));

  getrusage(RUSAGE_SELF, &usage);
  mapped_blas(blas, sizeof blas);
  resident_split(kb);
  CHECK(accel_wait_for_everyone(acc)); /* every rank read its share while all were alive */
  printf(
      "BENCH {\"impl\":\"libaccel\",\"model\":\"%s\",\"rank\":%d,\"world\":%d,\"threads\":%d,"
      "\"steps\":%d,\"batch\":%d,\"log_every_step\":%d,\"logging_s\":%.6f,\"timed_s\":%.6f,"
      "\"samples_per_s\":%.3f,\"main_wall\":%.6f,"
      "\"init_wall\":%.6f,"
      "\"ready_wall\":%.6f,\"first_step_wall\":%.6f,\"peak_rss_kb\":%ld,\"rss_anon_kb\":%ld,"
      "\"rss_file_kb\":%ld,\"rss_shmem_kb\":%ld,\"pss_kb\":%ld,\"pss_anon_kb\":%ld,"
      "\"pss_file_kb\":%ld,\"pss_shmem_kb\":%ld,\"blas\":\"%s\"}\n",
      model_name, rank, world, threads, steps, batch, log_every_step, logging, elapsed,
      (double)steps * batch * world / elapsed, main_wall, init_wall, data_wall, first_step_wall,
      usage.ru_maxrss, kb[0], kb[1], kb[2], kb[3], kb[4], kb[5], kb[6], blas);
  fflush(stdout);

  accel_optimizer_free(opt);
  accel_model_free(model);
  accel_dataloader_free(train);
  accel_dataset_free(train_set);
  accel_accelerator_free(acc);
  return 0;
}
