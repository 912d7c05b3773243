/*
 * train_fashion_mnist.c - PyTorch's classic MNIST CNN trained on Fashion-MNIST with libaccel.
 *
 *   ./train_fashion_mnist                          one process
 *   accel launch -n 2 ./train_fashion_mnist        two processes, same code
 *   options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1)
 *            --bf16 --max-steps S (0: whole epochs) --data DIR (/usr/share/datasets/fashion-mnist)
 *            --workers W (1: batches prefetched on one thread; 0: made when asked for)
 *
 * The model is built from libaccel's layer catalogue and TorchScript source; AdamW with a linear
 * warmup/decay schedule; evaluation on the 10k test images with gather_for_metrics. Every 10 steps
 * it logs loss, lr and samples/s, and at the end the test accuracy, to the trackers the
 * configuration names (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs: runs/train_fashion_mnist/).
 * Progress lines go through the accelerator's logger (ACCELERATE_LOG_LEVEL=warning silences
 * them); the test accuracy is printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <accel/accel.h>

#define CHECK(call)                                                         \
  do {                                                                      \
    accel_status st_ = (call);                                              \
    if (st_ != ACCEL_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                  \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static const char* kSource =
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
    "    return torch.cross_entropy_loss(self.forward(images), labels.long())\n"
    "\n"
    "def correct(self, images, labels):\n"
    "    return torch.eq(torch.argmax(self.forward(images), 1), labels.long()).long()\n";

/* Logs `count` named numbers at `step` to the run's trackers (none unless configured). */
static void log_numbers(accel_accelerator* acc, int64_t step, const char* const* keys,
                        const double* numbers, size_t count) {
  accel_values* values = NULL;
  size_t i;
  CHECK(accel_values_new(&values));
  for (i = 0; i < count; ++i) CHECK(accel_values_set_number(values, keys[i], numbers[i]));
  CHECK(accel_log(acc, values, step));
  accel_values_free(values);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static accel_dataset* idx_pair(const char* dir, const char* images, const char* labels) {
  char a[512], b[512];
  const char* paths[2];
  accel_dataset* ds = NULL;
  snprintf(a, sizeof a, "%s/%s", dir, images);
  snprintf(b, sizeof b, "%s/%s", dir, labels);
  paths[0] = a;
  paths[1] = b;
  CHECK(accel_dataset_from_idx(paths, 2, &ds));
  return ds;
}

/* Calls a method that returns one tensor (the loss, say); the caller frees it. */
static accel_tensor* call_one(accel_model* model, const char* method, accel_tensor* const* inputs,
                              size_t count) {
  accel_tensor_list* outputs = NULL;
  accel_tensor* result = NULL;
  CHECK(accel_model_call(model, method, (const accel_tensor* const*)inputs, count, &outputs));
  CHECK(accel_tensor_list_get(outputs, 0, &result));
  accel_tensor_list_free(outputs);
  return result;
}

int main(int argc, char** argv) {
  int epochs = 2, batch = 64, accum = 1, bf16 = 0, workers = 1, i;
  long max_steps = 0;
  double lr = 1e-3;
  const char* data = "/usr/share/datasets/fashion-mnist";
  char text[64], line[256];
  accel_config* cfg = NULL;
  accel_accelerator* acc = NULL;
  accel_model* model = NULL;
  accel_optimizer* opt = NULL;
  accel_scheduler* sched = NULL;
  accel_dataset *train_set = NULL, *test_set = NULL;
  accel_dataloader *train = NULL, *test = NULL;
  int32_t world = 1;
  int64_t steps_per_epoch = 0, total_steps, step = 0, params = 0;
  double start, loss_avg = 0, waited = 0;

  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
      epochs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc)
      lr = atof(argv[++i]);
    else if (!strcmp(argv[i], "--accum") && i + 1 < argc)
      accum = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc)
      max_steps = atol(argv[++i]);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc)
      data = argv[++i];
    else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
      workers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--bf16"))
      bf16 = 1;
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
              __FILE__);
      return 2;
    }
  }

  CHECK(accel_config_new(&cfg));
  snprintf(text, sizeof text, "%d", accum);
  CHECK(accel_config_set(cfg, "gradient_accumulation_steps", text));
  if (bf16) CHECK(accel_config_set(cfg, "mixed_precision", "bf16"));
  CHECK(accel_init(cfg, &acc));
  accel_config_free(cfg);
  CHECK(accel_num_processes(acc, &world));
  CHECK(accel_set_seed(acc, 1234, false));

  /* The CNN of PyTorch's MNIST example. */
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "conv1", "conv2d",
                              "in_channels=1 out_channels=32 kernel_size=3"));
  CHECK(accel_model_add_layer(model, "conv2", "conv2d",
                              "in_channels=32 out_channels=64 kernel_size=3"));
  CHECK(accel_model_add_layer(model, "fc1", "linear", "in_features=9216 out_features=128"));
  CHECK(accel_model_add_layer(model, "fc2", "linear", "in_features=128 out_features=10"));
  CHECK(accel_model_define(model, kSource));
  CHECK(accel_model_parameter_element_count(model, &params));

  train_set = idx_pair(data, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
  test_set = idx_pair(data, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
  snprintf(text, sizeof text, "%d", batch);
  CHECK(accel_dataloader_new(acc, train_set, &train));
  CHECK(accel_dataloader_set(train, "batch_size", text));
  CHECK(accel_dataloader_set(train, "shuffle", "true"));
  CHECK(accel_dataloader_set(train, "seed", "42"));
  snprintf(text, sizeof text, "%d", workers);
  CHECK(accel_dataloader_set(train, "num_workers", text));
  CHECK(accel_dataloader_new(acc, test_set, &test));
  /* 100: the evaluation's largest activation (100 x 64 x 24 x 24 floats, 15 MB) stays under
   * glibc's largest mmap threshold (32 MiB), so its memory is reused from batch to batch instead
   * of being mapped and faulted in afresh (at 500 that took half of a short run's time). */
  CHECK(accel_dataloader_set(test, "batch_size", "100"));
  CHECK(accel_dataloader_set(test, "num_workers", "1"));
  CHECK(accel_dataloader_batch_count(train, &steps_per_epoch));
  total_steps = steps_per_epoch * epochs;
  if (max_steps > 0 && max_steps < total_steps) total_steps = max_steps;

  CHECK(accel_optimizer_new(model, "adamw", &opt));
  snprintf(text, sizeof text, "%g", lr);
  CHECK(accel_optimizer_set(opt, "lr", text));
  /* The schedule counts single-process optimizer steps: the accelerator steps it num_processes
   * times per step (see accel_scheduler_new), so it is written for total_steps * world / accum. */
  CHECK(accel_scheduler_new(opt, "linear", &sched));
  snprintf(text, sizeof text, "%lld", (long long)(total_steps * world / accum / 10));
  CHECK(accel_scheduler_set(sched, "warmup_steps", text));
  snprintf(text, sizeof text, "%lld", (long long)(total_steps * world / accum));
  CHECK(accel_scheduler_set(sched, "total_steps", text));
  {
    void* objects[5];
    objects[0] = model;
    objects[1] = opt;
    objects[2] = sched;
    objects[3] = train;
    objects[4] = test;
    CHECK(accel_prepare(acc, objects, 5));
  }
  snprintf(line, sizeof line, "%d process(es), %lld parameters, %lld steps of %d per process%s",
           world, (long long)params, (long long)total_steps, batch, bf16 ? ", bf16" : "");
  CHECK(accel_log_message(acc, ACCEL_LOG_INFO, 0, line));
  {
    const char* keys[] = {"lr", "batch_size", "processes", "gradient_accumulation_steps"};
    const double hparams[] = {lr, batch, world, accum};
    accel_values* config = NULL;
    size_t k;
    CHECK(accel_values_new(&config));
    for (k = 0; k < 4; ++k) CHECK(accel_values_set_number(config, keys[k], hparams[k]));
    CHECK(accel_init_trackers(acc, "train_fashion_mnist", config));
    accel_values_free(config);
  }

  start = now();
  for (i = 0; i < epochs && step < total_steps; ++i) {
    CHECK(accel_dataloader_set_epoch(train, i));
    CHECK(accel_model_train(model, true));
    for (;;) {
      accel_tensor* fields[2];
      accel_tensor* loss = NULL;
      size_t n = 0;
      double value = 0, asked = now();
      CHECK(accel_dataloader_next(train, fields, 2, &n));
      waited += now() - asked; /* the time this step waited for its batch */
      if (n == 0) break;       /* the end of the epoch */
      CHECK(accel_accumulate(acc));
      loss = call_one(model, "training_step", fields, 2);
      CHECK(accel_backward(acc, loss));
      CHECK(accel_optimizer_step(opt));
      CHECK(accel_scheduler_step(sched));
      CHECK(accel_optimizer_zero_grad(opt));
      CHECK(accel_tensor_item_f64(loss, &value));
      loss_avg = step == 0 ? value : 0.98 * loss_avg + 0.02 * value;
      accel_tensor_free(loss);
      accel_tensor_free(fields[0]);
      accel_tensor_free(fields[1]);
      ++step;
      if (step % 10 == 0 || step == total_steps) {
        const char* keys[] = {"loss", "lr", "samples_per_s"};
        double logged[3] = {loss_avg, 0, (double)step * batch * world / (now() - start)};
        CHECK(accel_scheduler_lr(sched, &logged[1]));
        log_numbers(acc, step, keys, logged, 3);
      }
      if (step % 100 == 0 || step == total_steps) {
        const double elapsed = now() - start;
        const double rate = (double)step * batch * world / elapsed;
        snprintf(line, sizeof line,
                 "epoch %d step %lld/%lld loss %.4f %.0f samples/s ETA %.0fs data wait %.2f%%",
                 i + 1, (long long)step, (long long)total_steps, loss_avg, rate,
                 (double)(total_steps - step) * batch * world / rate, 100.0 * waited / elapsed);
        CHECK(accel_log_message(acc, ACCEL_LOG_INFO, 0, line));
      }
      if (step >= total_steps) break;
    }
  }

  /* Evaluation: each test sample counted once over all processes. */
  {
    int64_t correct = 0, seen = 0;
    CHECK(accel_model_train(model, false));
    for (;;) {
      accel_tensor* fields[2];
      accel_tensor *hits = NULL, *all = NULL;
      size_t n = 0, size = 0;
      int64_t count = 0, k;
      int64_t* values;
      CHECK(accel_dataloader_next(test, fields, 2, &n));
      if (n == 0) break;
      hits = call_one(model, "correct", fields, 2);
      CHECK(accel_gather_for_metrics(acc, hits, &all));
      CHECK(accel_tensor_element_count(all, &count));
      values = malloc((size_t)count * sizeof *values);
      CHECK(accel_tensor_to_data(all, values, (size_t)count * sizeof *values, &size));
      for (k = 0; k < count; ++k) correct += values[k];
      seen += count;
      free(values);
      accel_tensor_free(all);
      accel_tensor_free(hits);
      accel_tensor_free(fields[0]);
      accel_tensor_free(fields[1]);
    }
    snprintf(line, sizeof line, "test accuracy %.4f (%lld of %lld) after %.1fs of training",
             (double)correct / (double)seen, (long long)correct, (long long)seen, now() - start);
    CHECK(accel_print(acc, line));
    {
      const char* keys[] = {"accuracy"};
      const double accuracy = (double)correct / (double)seen;
      log_numbers(acc, step, keys, &accuracy, 1);
    }
  }
  CHECK(accel_end_training(acc));

  CHECK(accel_wait_for_everyone(acc));
  accel_scheduler_free(sched);
  accel_optimizer_free(opt);
  accel_model_free(model);
  accel_dataloader_free(train);
  accel_dataloader_free(test);
  accel_dataset_free(train_set);
  accel_dataset_free(test_set);
  accel_accelerator_free(acc);
  return 0;
}
