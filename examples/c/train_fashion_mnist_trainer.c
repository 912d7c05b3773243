/*
 * train_fashion_mnist_trainer.c - train_fashion_mnist.c through the Trainer: the same CNN, data,
 * optimizer, schedule and options, with the loop, the logging, an evaluation and a checkpoint every
 * epoch, the best model and resume left to accel_trainer.
 *
 *   ./train_fashion_mnist_trainer                          one process
 *   accel launch -n 2 ./train_fashion_mnist_trainer        two processes, same code
 *   accel launch -n 2 ./train_fashion_mnist_trainer --resume   continue from the latest checkpoint
 *   options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1)
 *            --bf16 --max-steps S (0: whole epochs; optimizer steps) --workers W (1)
 *            --data DIR (/usr/share/datasets/fashion-mnist) --output-dir DIR
 * (fashion_mnist_trainer)
 *            --resume (resume_from_checkpoint=latest)
 *
 * At each epoch's end (and where --max-steps stops the last one) the Trainer evaluates on the 10k
 * test images (accuracy through compute_metrics, on predictions and labels gathered with
 * gather_for_metrics) and saves OUTPUT_DIR/checkpoint-<step> (an accel_save_state directory with
 * trainer_state.json); save_total_limit=2 keeps the newest and the best; at the end the best
 * checkpoint's model is loaded back and evaluated once more. Every 10 steps the loss, learning
 * rate and epoch are logged, with the evaluations, to the trackers the configuration names
 * (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs: runs/train_fashion_mnist_trainer/) and through the
 * accelerator's logger (ACCELERATE_LOG_LEVEL=warning silences it); the test accuracy is printed.
 * The hand-written loop does not clip gradients, so neither does this one (max_grad_norm=0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* train_fashion_mnist.c's model, with the eval_step the Trainer calls: (loss, predictions). */
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
    "def eval_step(self, images, labels):\n"
    "    logits = self.forward(images)\n"
    "    return torch.cross_entropy_loss(logits, labels.long()), torch.argmax(logits, 1)\n";

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

/* A tensor of class indices (int64 predictions, uint8 labels as the IDX file stores them) as
 * int64 values; the caller frees them. NULL on failure. */
static int64_t* as_int64(const accel_tensor* t, int64_t* count) {
  accel_dtype dtype = 0;
  size_t size = 0, unit;
  int64_t i, *values;
  unsigned char* raw;
  if (accel_tensor_element_count(t, count) != ACCEL_OK) return NULL;
  if (accel_tensor_dtype(t, &dtype) != ACCEL_OK) return NULL;
  if (dtype != ACCEL_DTYPE_I64 && dtype != ACCEL_DTYPE_U8) return NULL;
  unit = dtype == ACCEL_DTYPE_I64 ? sizeof(int64_t) : 1;
  raw = malloc((size_t)*count * unit + 1);
  values = malloc((size_t)*count * sizeof(int64_t) + 1);
  if (!raw || !values || accel_tensor_to_data(t, raw, (size_t)*count * unit, &size) != ACCEL_OK) {
    free(raw);
    free(values);
    return NULL;
  }
  for (i = 0; i < *count; ++i) {
    if (dtype == ACCEL_DTYPE_I64)
      memcpy(&values[i], raw + i * (int64_t)unit, sizeof(int64_t));
    else
      values[i] = raw[i];
  }
  free(raw);
  return values;
}

/* compute_metrics: the share of test images classified right ("accuracy"; logged as
 * eval_accuracy). The Trainer gives every sample once, gathered from every process. */
static int32_t accuracy(const accel_tensor* predictions, const accel_tensor* labels,
                        accel_values* metrics, void* user_data) {
  int64_t n = 0, m = 0, i, hits = 0;
  int64_t* p = as_int64(predictions, &n);
  int64_t* l = as_int64(labels, &m);
  int32_t failed = !p || !l || n != m || n == 0;
  (void)user_data;
  for (i = 0; !failed && i < n; ++i) hits += p[i] == l[i];
  if (!failed)
    failed = accel_values_set_number(metrics, "accuracy", (double)hits / (double)n) != ACCEL_OK;
  free(p);
  free(l);
  return failed;
}

/* The number `key` in `metrics` ("eval_accuracy"), or -1. */
static double metric(const accel_values* metrics, const char* key) {
  size_t i, count = 0;
  if (accel_values_count(metrics, &count) != ACCEL_OK) return -1;
  for (i = 0; i < count; ++i) {
    const char* name = NULL;
    double number = 0;
    if (accel_values_get(metrics, i, &name, NULL, &number, NULL) == ACCEL_OK &&
        strcmp(name, key) == 0)
      return number;
  }
  return -1;
}

/* trainer_state.json's best_model_checkpoint, for the closing line ("none" if unset). */
static void best_checkpoint(const accel_trainer* t, char* out, size_t size) {
  size_t need = 0;
  char *state, *at, *end;
  snprintf(out, size, "none");
  accel_trainer_state_json(t, NULL, 0, &need);
  state = malloc(need ? need : 1);
  if (!state || accel_trainer_state_json(t, state, need, &need) != ACCEL_OK) {
    free(state);
    return;
  }
  at = strstr(state, "\"best_model_checkpoint\": \"");
  if (at) {
    at += strlen("\"best_model_checkpoint\": \"");
    end = strchr(at, '"');
    if (end) snprintf(out, size, "%.*s", (int)(end - at), at);
  }
  free(state);
}

int main(int argc, char** argv) {
  int epochs = 2, batch = 64, accum = 1, bf16 = 0, workers = 1, resume = 0, i;
  long max_steps = 0;
  double lr = 1e-3, acc_value;
  const char* data = "/usr/share/datasets/fashion-mnist";
  const char* output_dir = "fashion_mnist_trainer";
  char text[64], line[512], settings[2048], best[1024];
  accel_config* cfg = NULL;
  accel_accelerator* acc = NULL;
  accel_model* model = NULL;
  accel_optimizer* opt = NULL;
  accel_scheduler* sched = NULL;
  accel_dataset *train_set = NULL, *test_set = NULL;
  accel_dataloader *train = NULL, *test = NULL;
  accel_trainer* trainer = NULL;
  accel_values* metrics = NULL;
  int32_t world = 1;
  int64_t batches_per_epoch = 0, updates, params = 0, step = 0;

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
    else if (!strcmp(argv[i], "--output-dir") && i + 1 < argc)
      output_dir = argv[++i];
    else if (!strcmp(argv[i], "--bf16"))
      bf16 = 1;
    else if (!strcmp(argv[i], "--resume"))
      resume = 1;
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
              __FILE__);
      return 2;
    }
  }
  if (epochs < 1 || batch < 1 || accum < 1 || max_steps < 0) {
    fprintf(stderr, "--epochs, --batch-size and --accum must be at least 1\n");
    return 2;
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
  CHECK(accel_dataloader_set(test, "batch_size", "100")); /* as train_fashion_mnist.c: why there */
  CHECK(accel_dataloader_set(test, "num_workers", "1"));

  /* The optimizer updates the run makes: an epoch ends with a shorter accumulation window. */
  CHECK(accel_dataloader_batch_count(train, &batches_per_epoch));
  updates = (batches_per_epoch + accum - 1) / accum * epochs;
  if (max_steps > 0 && max_steps < updates) updates = max_steps;
  CHECK(accel_optimizer_new(model, "adamw", &opt));
  snprintf(text, sizeof text, "%g", lr);
  CHECK(accel_optimizer_set(opt, "lr", text));
  /* As train_fashion_mnist.c: the accelerator steps the schedule num_processes times a step. */
  CHECK(accel_scheduler_new(opt, "linear", &sched));
  snprintf(text, sizeof text, "%lld", (long long)(updates * world / 10));
  CHECK(accel_scheduler_set(sched, "warmup_steps", text));
  snprintf(text, sizeof text, "%lld", (long long)(updates * world));
  CHECK(accel_scheduler_set(sched, "total_steps", text));

  snprintf(settings, sizeof settings,
           "num_train_epochs=%d,max_steps=%ld,logging_steps=10,eval_strategy=epoch,"
           "save_strategy=epoch,save_total_limit=2,load_best_model_at_end=true,"
           "metric_for_best_model=accuracy,max_grad_norm=0,output_dir=%s%s",
           epochs, max_steps > 0 ? max_steps : -1, output_dir,
           resume ? ",resume_from_checkpoint=latest" : "");
  /* Prepares the model, optimizer, schedule and both loaders (accel_prepare's order). */
  CHECK(accel_trainer_new(acc, model, opt, sched, train, test, settings, &trainer));
  CHECK(accel_trainer_set_compute_metrics(trainer, accuracy, NULL, NULL));
  snprintf(line, sizeof line, "%d process(es), %lld parameters, %lld steps of %d per process%s",
           world, (long long)params, (long long)updates, batch, bf16 ? ", bf16" : "");
  CHECK(accel_log_message(acc, ACCEL_LOG_INFO, 0, line));
  {
    const char* keys[] = {"lr", "batch_size", "processes", "gradient_accumulation_steps"};
    const double hparams[] = {lr, batch, world, accum};
    accel_values* config = NULL;
    size_t k;
    CHECK(accel_values_new(&config));
    for (k = 0; k < 4; ++k) CHECK(accel_values_set_number(config, keys[k], hparams[k]));
    /* Before train: a resumed run cuts the trackers' records back to its checkpoint's step. */
    CHECK(accel_init_trackers(acc, "train_fashion_mnist_trainer", config));
    accel_values_free(config);
  }

  CHECK(accel_trainer_train(trainer));
  /* The best checkpoint's model is back (load_best_model_at_end): its accuracy, logged too. */
  CHECK(accel_trainer_evaluate(trainer, &metrics));
  CHECK(accel_trainer_global_step(trainer, &step));
  acc_value = metric(metrics, "eval_accuracy");
  best_checkpoint(trainer, best, sizeof best);
  snprintf(line, sizeof line, "test accuracy %.4f after %lld steps (best checkpoint: %s)",
           acc_value, (long long)step, best);
  CHECK(accel_print(acc, line));
  accel_values_free(metrics);
  CHECK(accel_end_training(acc));

  CHECK(accel_wait_for_everyone(acc));
  accel_trainer_free(trainer);
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
