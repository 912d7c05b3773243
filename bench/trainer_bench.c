/*
 * trainer_bench.c - what the Trainer costs per step against the loop written by hand (issue 52's
 * bar: at most 1 % more). One process (or each rank of `accel launch`) builds the MLP or the CNN
 * of bench/train_bench.c (or --model linear: one layer) on Fashion-MNIST (AdamW, lr 1e-3, a linear
 * schedule, clipping at 1.0, fp32) once, then trains alternating rounds of the same steps on the
 * same objects: by hand (tests/mp/trainer_program.c's hand_loop: accumulate, training_step,
 * backward, clip, optimizer and scheduler steps, zero_grad) and through accel_trainer_train
 * (logging_steps far away, save_strategy=no, speed_metrics=false, progress_bar=false, no
 * evaluation). Each round times the steps from the end of step --warmup to the end of step --warmup
 * + --steps (in the Trainer by an on_step_end callback, which is the Trainer's cost too), and
 * prints one line per rank:
 *
 *   BENCH {"impl":"trainer","round":3,"rank":0,"world":2,"steps":200,"timed_s":...,...}
 *
 * cpu_s is this process's CPU time over the same steps (all its threads), call_s the whole round
 * (the hand loop, or accel_trainer_train from its start to its end).
 * bench/trainer_overhead.py runs it and reports the ratios.
 *
 *   accel launch -n 2 trainer_bench --model mlp --steps 200 --warmup 20 --rounds 21 --threads 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static const char* kMlpSource =
    "def forward(self, images):\n"
    "    x = images.float().div(255.0).sub(0.2860).div(0.3530).flatten(1)\n"
    "    x = torch.relu(self.fc1.forward(x))\n"
    "    x = torch.relu(self.fc2.forward(x))\n"
    "    return self.fc3.forward(x)\n"
    "\n"
    "def training_step(self, images, labels):\n"
    "    return torch.cross_entropy_loss(self.forward(images), labels.long())\n";

/* One linear layer: a step of ~0.1 ms, so that what the Trainer adds per step shows in
 * microseconds rather than as a share of a real model's step. */
static const char* kLinearSource =
    "def training_step(self, images, labels):\n"
    "    x = images.float().div(255.0).flatten(1)\n"
    "    return torch.cross_entropy_loss(self.fc.forward(x), labels.long())\n";

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

typedef struct {
  accel_accelerator* acc;
  accel_model* model;
  accel_optimizer* opt;
  accel_scheduler* sched;
  accel_dataloader* train;
  long warmup, steps;
  double start, end;         /* the timed steps' ends, on the monotonic clock */
  double cpu_start, cpu_end; /* the same on this process's CPU clock (all its threads) */
} Bench;

/* This process's CPU seconds: less disturbed than the wall clock by other work on the machine
 * (a rank descheduled while its round runs), though not by what it does to the caches. */
static double cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static accel_model* build_model(const char* name) {
  accel_model* model = NULL;
  CHECK(accel_model_new(&model));
  if (!strcmp(name, "mlp")) {
    CHECK(accel_model_add_layer(model, "fc1", "linear", "in_features=784 out_features=256"));
    CHECK(accel_model_add_layer(model, "fc2", "linear", "in_features=256 out_features=256"));
    CHECK(accel_model_add_layer(model, "fc3", "linear", "in_features=256 out_features=10"));
    CHECK(accel_model_define(model, kMlpSource));
  } else if (!strcmp(name, "linear")) {
    CHECK(accel_model_add_layer(model, "fc", "linear", "in_features=784 out_features=10"));
    CHECK(accel_model_define(model, kLinearSource));
  } else if (!strcmp(name, "cnn")) {
    CHECK(accel_model_add_layer(model, "conv1", "conv2d",
                                "in_channels=1 out_channels=32 kernel_size=3"));
    CHECK(accel_model_add_layer(model, "conv2", "conv2d",
                                "in_channels=32 out_channels=64 kernel_size=3"));
    CHECK(accel_model_add_layer(model, "fc1", "linear", "in_features=9216 out_features=128"));
    CHECK(accel_model_add_layer(model, "fc2", "linear", "in_features=128 out_features=10"));
    CHECK(accel_model_define(model, kCnnSource));
  } else {
    fprintf(stderr, "unknown model %s (mlp, cnn or linear)\n", name);
    exit(2);
  }
  return model;
}

/* Stamps the end of an optimizer step; called by both loops at the same point. */
static void stamp(Bench* b, long step) {
  if (step == b->warmup) {
    b->start = mono();
    b->cpu_start = cpu();
  }
  if (step == b->warmup + b->steps) {
    b->end = mono();
    b->cpu_end = cpu();
  }
}

/* The loop the Trainer runs, written by hand (tests/mp/trainer_program.c's hand_loop). */
static void hand_round(Bench* b) {
  const long max_steps = b->warmup + b->steps;
  long step = 0;
  int epoch;
  for (epoch = 0; step < max_steps; ++epoch) {
    CHECK(accel_dataloader_set_epoch(b->train, epoch));
    CHECK(accel_model_train(b->model, true));
    while (step < max_steps) {
      accel_tensor* fields[2];
      accel_tensor_list* out = NULL;
      accel_tensor* loss = NULL;
      bool sync = false, skipped = false;
      size_t n = 0;
      CHECK(accel_dataloader_next(b->train, fields, 2, &n));
      if (n == 0) break;
      CHECK(accel_accumulate(b->acc));
      CHECK(
          accel_model_call(b->model, "training_step", (const accel_tensor* const*)fields, 2, &out));
      CHECK(accel_tensor_list_get(out, 0, &loss));
      CHECK(accel_backward(b->acc, loss));
      CHECK(accel_sync_gradients(b->acc, &sync));
      if (sync) {
        CHECK(accel_clip_grad_norm(b->acc, b->model, 1.0, 2.0, NULL));
        CHECK(accel_optimizer_step(b->opt));
        CHECK(accel_optimizer_step_was_skipped(b->opt, &skipped));
        if (!skipped) CHECK(accel_scheduler_step(b->sched));
        CHECK(accel_optimizer_zero_grad(b->opt));
        stamp(b, ++step);
      }
      accel_tensor_free(loss);
      accel_tensor_list_free(out);
      accel_tensor_free(fields[0]);
      accel_tensor_free(fields[1]);
    }
  }
}

static int32_t on_step_end(accel_trainer* trainer, accel_trainer_event event,
                           const accel_values* values, void* user_data) {
  int64_t step = 0;
  (void)values;
  if (event != ACCEL_TRAINER_ON_STEP_END) return 0;
  if (accel_trainer_global_step(trainer, &step) != ACCEL_OK) return 1;
  stamp(user_data, (long)step);
  return 0;
}

int main(int argc, char** argv) {
  const char* model_name = "mlp";
  const char* data = "/usr/share/datasets/fashion-mnist";
  const char* out_dir = "/tmp/trainer_bench_output"; /* never written: save_strategy=no */
  int threads = 1, batch = 64, accum = 1, rounds = 7, r, i;
  long steps = 400, warmup = 20;
  int32_t world = 1, rank = 0;
  char text[64], settings[1024], images[512], labels[512];
  const char* paths[2];
  accel_config* cfg = NULL;
  accel_dataset* train_set = NULL;
  accel_trainer* trainer = NULL;
  Bench b;
  memset(&b, 0, sizeof b);

  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc)
      model_name = argv[++i];
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atol(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
      warmup = atol(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--accum") && i + 1 < argc)
      accum = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc)
      data = argv[++i];
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
              __FILE__);
      return 2;
    }
  }
  if (steps < 1 || warmup < 1 || rounds < 1 || threads < 1 || batch < 1 || accum < 1) {
    fprintf(stderr, "--steps, --warmup, --rounds, --threads, --batch-size, --accum: >= 1\n");
    return 2;
  }
  b.steps = steps;
  b.warmup = warmup;

  CHECK(accel_config_new(&cfg));
  snprintf(text, sizeof text, "%d", threads);
  CHECK(accel_config_set(cfg, "num_threads", text));
  snprintf(text, sizeof text, "%d", accum);
  CHECK(accel_config_set(cfg, "gradient_accumulation_steps", text));
  CHECK(accel_init(cfg, &b.acc));
  accel_config_free(cfg);
  CHECK(accel_num_processes(b.acc, &world));
  CHECK(accel_process_index(b.acc, &rank));
  CHECK(accel_set_seed(b.acc, 1234, false));

  b.model = build_model(model_name);
  snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", data);
  snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", data);
  paths[0] = images;
  paths[1] = labels;
  CHECK(accel_dataset_from_idx(paths, 2, &train_set));
  CHECK(accel_dataloader_new(b.acc, train_set, &b.train));
  snprintf(text, sizeof text, "%d", batch);
  CHECK(accel_dataloader_set(b.train, "batch_size", text));
  CHECK(accel_dataloader_set(b.train, "shuffle", "true"));
  CHECK(accel_dataloader_set(b.train, "drop_last", "true"));
  CHECK(accel_optimizer_new(b.model, "adamw", &b.opt));
  CHECK(accel_optimizer_set(b.opt, "lr", "1e-3"));
  CHECK(accel_scheduler_new(b.opt, "linear", &b.sched));
  CHECK(accel_scheduler_set(b.sched, "warmup_steps", "100"));
  CHECK(accel_scheduler_set(b.sched, "total_steps", "1000000"));
  {
    void* objects[4];
    objects[0] = b.model;
    objects[1] = b.opt;
    objects[2] = b.sched;
    objects[3] = b.train;
    CHECK(accel_prepare(b.acc, objects, 4));
  }
  snprintf(settings, sizeof settings,
           "max_steps=%ld,logging_steps=1000000,save_strategy=no,speed_metrics=false,"
           "progress_bar=false,output_dir=%s",
           warmup + steps, out_dir);
  CHECK(accel_trainer_new(b.acc, b.model, b.opt, b.sched, b.train, NULL, settings, &trainer));
  CHECK(accel_trainer_add_callback(trainer, on_step_end, &b, NULL));

  /* Round 0 of each is a warm-up of the whole path (first-call costs), not reported. Then
   * hand, trainer, trainer, hand, hand, trainer, ...: each pair in the other order than the last,
   * so drift on the machine hits both alike. */
  for (r = 0; r <= rounds; ++r) {
    int k;
    for (k = 0; k < 2; ++k) {
      const int use_trainer = (r % 2 == 0) ? k == 1 : k == 0;
      const double begin = mono();
      double call;
      CHECK(accel_wait_for_everyone(b.acc));
      b.start = b.end = 0;
      if (use_trainer)
        CHECK(accel_trainer_train(trainer));
      else
        hand_round(&b);
      call = mono() - begin;
      if (b.start == 0 || b.end == 0) {
        fprintf(stderr, "round %d: the timed steps were not reached\n", r);
        return 1;
      }
      if (r == 0) continue;
      printf(
          "BENCH {\"impl\":\"%s\",\"model\":\"%s\",\"round\":%d,\"rank\":%d,\"world\":%d,"
          "\"threads\":%d,\"accum\":%d,\"batch\":%d,\"steps\":%ld,\"warmup\":%ld,"
          "\"timed_s\":%.6f,\"cpu_s\":%.6f,\"call_s\":%.6f}\n",
          use_trainer ? "trainer" : "hand", model_name, r, rank, world, threads, accum, batch,
          steps, warmup, b.end - b.start, b.cpu_end - b.cpu_start, call);
      fflush(stdout);
    }
  }
  CHECK(accel_wait_for_everyone(b.acc));
  accel_trainer_free(trainer);
  accel_scheduler_free(b.sched);
  accel_optimizer_free(b.opt);
  accel_model_free(b.model);
  accel_dataloader_free(b.train);
  accel_dataset_free(train_set);
  accel_accelerator_free(b.acc);
  return 0;
}
