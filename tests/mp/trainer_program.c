/* The Trainer against the loop a program writes by hand, through the C interface, on any number
 * of processes (started by `accel launch`). Usage:
 *   trainer_program hand|trainer OUT ACCUMULATION [SETTINGS]
 *   trainer_program predict OUT
 *   trainer_program early OUT ACCUMULATION SETTINGS   (TRAINER_SCORES: the scripted metric)
 *   trainer_program ragged OUT ACCUMULATION BATCH      (num_items_in_batch on ragged text)
 *   trainer_program events OUT [ACCUMULATION [SETTINGS TRAIN_SAMPLES EVAL_SAMPLES]]
 * Both training modes build the same model, optimizer, schedule and data with the same seed and
 * write the final parameters with accel_save_model into OUT/model. `trainer` also writes, per
 * rank, OUT/events_<rank>.txt (every callback event and the step it saw) and
 * OUT/trace_<rank>.txt ("micro <step> <loss>" per micro-batch from its own training step,
 * "log <step> <loss>" per logged loss), and OUT/trainer_state.json (rank 0). `predict` writes
 * OUT/predict_<rank>.txt: the predictions (each sample's index, as a float) of 23 samples,
 * batch 4. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"

#define CHECK(call)                                                         \
  do {                                                                      \
    accel_status st_ = (call);                                              \
    if (st_ != ACCEL_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                  \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

enum { kSamples = 96, kFeatures = 8, kClasses = 4, kBatch = 4 };

static const char kSource[] =
    "def training_step(self, x, y):\n"
    "    return torch.cross_entropy_loss(self.fc.forward(x), y)\n"
    "def eval_step(self, x, y):\n"
    "    logits = self.fc.forward(x)\n"
    "    return torch.cross_entropy_loss(logits, y), logits.argmax(1)\n"
    "def index(self, x, y):\n"
    "    return x[:, 0]\n";

typedef struct {
  accel_accelerator* acc;
  accel_model* model;
  accel_optimizer* opt;
  accel_scheduler* sched;
  accel_dataloader *train, *eval;
  FILE *events, *trace;
  accel_trainer* trainer;
} Run;

static void dump_params(const accel_model* m, FILE* f);

/* Samples whose class is a function of the features, so the model has something to learn; x[0]
 * is the sample's index (the predictions of `predict`). */
static accel_dataset* dataset(int n) {
  float* x = malloc(sizeof(float) * n * kFeatures);
  int64_t* y = malloc(sizeof(int64_t) * n);
  int64_t xs[2] = {n, kFeatures}, ys[1] = {n};
  accel_tensor *tx = NULL, *ty = NULL;
  const accel_tensor* fields[2];
  accel_dataset* ds = NULL;
  int i, f;
  for (i = 0; i < n; ++i) {
    y[i] = (i * 7) % kClasses;
    x[i * kFeatures] = (float)i;
    for (f = 1; f < kFeatures; ++f)
      x[i * kFeatures + f] = (float)((i * 31 + f * 17) % 13) / 13.0f + (f % kClasses == y[i]);
  }
  CHECK(accel_tensor_from_data(x, sizeof(float) * n * kFeatures, ACCEL_DTYPE_F32, xs, 2, &tx));
  CHECK(accel_tensor_from_data(y, sizeof(int64_t) * n, ACCEL_DTYPE_I64, ys, 1, &ty));
  fields[0] = tx;
  fields[1] = ty;
  CHECK(accel_dataset_from_tensors(fields, 2, &ds));
  accel_tensor_free(tx);
  accel_tensor_free(ty);
  free(x);
  free(y);
  return ds;
}

static accel_dataloader* loader(accel_accelerator* acc, int n, int shuffle) {
  accel_dataset* ds = dataset(n);
  accel_dataloader* l = NULL;
  char text[16];
  CHECK(accel_dataloader_new(acc, ds, &l));
  /* TRAINER_BATCH: another batch size per process (a resume on another number of processes
   * keeping the global batch). */
  snprintf(text, sizeof text, "%d",
           getenv("TRAINER_BATCH") ? atoi(getenv("TRAINER_BATCH")) : kBatch);
  CHECK(accel_dataloader_set(l, "batch_size", text));
  if (shuffle) {
    CHECK(accel_dataloader_set(l, "shuffle", "true"));
    CHECK(accel_dataloader_set(l, "seed", "7"));
  }
  accel_dataset_free(ds);
  return l;
}

/* TRAINER_LOG_WITH (jsonl, csv, tensorboard, all): the trackers, under OUT/logs/trainer. */
static void build(Run* r, const char* accumulation, const char* out) {
  accel_config* cfg = NULL;
  char logs[4096];
  CHECK(accel_config_new(&cfg));
  CHECK(accel_config_set(cfg, "gradient_accumulation_steps", accumulation));
  if (getenv("TRAINER_LOG_WITH")) {
    snprintf(logs, sizeof logs, "%s/logs", out);
    CHECK(accel_config_set(cfg, "log_with", getenv("TRAINER_LOG_WITH")));
    CHECK(accel_config_set(cfg, "logging_dir", logs));
  }
  CHECK(accel_init(cfg, &r->acc));
  accel_config_free(cfg);
  CHECK(accel_set_seed(r->acc, 42, false));
  CHECK(accel_model_new(&r->model));
  CHECK(accel_model_add_layer(r->model, "fc", "linear", "in_features=8 out_features=4"));
  CHECK(accel_model_define(r->model, kSource));
  CHECK(accel_optimizer_new(r->model, "adamw", &r->opt));
  CHECK(accel_optimizer_set(r->opt, "lr", "0.01"));
  /* TRAINER_CONSTANT_LR: a constant schedule, which does not depend on the number of processes
   * (the accelerator steps a schedule once per process and step, as Accelerate does). */
  if (getenv("TRAINER_CONSTANT_LR")) {
    CHECK(accel_scheduler_new(r->opt, "constant", &r->sched));
  } else {
    CHECK(accel_scheduler_new(r->opt, "linear", &r->sched));
    CHECK(accel_scheduler_set(r->sched, "warmup_steps", "20"));
    CHECK(accel_scheduler_set(r->sched, "total_steps", "2000"));
  }
  r->train = loader(r->acc, kSamples, 1);
  r->eval = loader(r->acc, 23, 0);
}

static void hand_loop(Run* r, long max_steps) {
  void* objects[5];
  long step = 0;
  int epoch;
  objects[0] = r->model;
  objects[1] = r->opt;
  objects[2] = r->sched;
  objects[3] = r->train;
  objects[4] = r->eval;
  CHECK(accel_prepare(r->acc, objects, 5));
  for (epoch = 0; step < max_steps; ++epoch) {
    CHECK(accel_dataloader_set_epoch(r->train, epoch));
    CHECK(accel_model_train(r->model, true));
    for (;;) {
      accel_tensor* fields[2];
      accel_tensor_list* out = NULL;
      accel_tensor* loss = NULL;
      bool sync = false, skipped = false;
      size_t n = 0;
      CHECK(accel_dataloader_next(r->train, fields, 2, &n));
      if (n == 0) break;
      CHECK(accel_accumulate(r->acc));
      CHECK(
          accel_model_call(r->model, "training_step", (const accel_tensor* const*)fields, 2, &out));
      CHECK(accel_tensor_list_get(out, 0, &loss));
      CHECK(accel_backward(r->acc, loss));
      CHECK(accel_sync_gradients(r->acc, &sync));
      if (sync) {
        CHECK(accel_clip_grad_norm(r->acc, r->model, 1.0, 2.0, NULL));
        CHECK(accel_optimizer_step(r->opt));
        CHECK(accel_optimizer_step_was_skipped(r->opt, &skipped));
        if (!skipped) CHECK(accel_scheduler_step(r->sched));
        CHECK(accel_optimizer_zero_grad(r->opt));
        ++step;
      }
      accel_tensor_free(loss);
      accel_tensor_list_free(out);
      accel_tensor_free(fields[0]);
      accel_tensor_free(fields[1]);
      if (step >= max_steps) break;
    }
  }
}

static int32_t on_event(accel_trainer* trainer, accel_trainer_event event,
                        const accel_values* values, void* user_data) {
  Run* r = user_data;
  int64_t step = 0;
  size_t i, count = 0;
  if (accel_trainer_global_step(trainer, &step) != ACCEL_OK) return 1;
  /* TRAINER_KILL_AT=N: the process dies by SIGKILL inside step N+1's accumulation window. */
  if (event == ACCEL_TRAINER_ON_SUBSTEP_END && getenv("TRAINER_KILL_AT") &&
      step == atol(getenv("TRAINER_KILL_AT"))) {
    fflush(NULL);
    raise(SIGKILL);
  }
  fprintf(r->events, "%s %lld\n", accel_trainer_event_name(event), (long long)step);
  if (r->trace && event == ACCEL_TRAINER_ON_LOG && values &&
      accel_values_count(values, &count) == ACCEL_OK) {
    for (i = 0; i < count; ++i) {
      const char* key = NULL;
      double number = 0;
      if (accel_values_get(values, i, &key, NULL, &number, NULL) != ACCEL_OK) return 1;
      if (strcmp(key, "loss") == 0) fprintf(r->trace, "log %lld %.17g\n", (long long)step, number);
    }
  }
  return 0;
}

/* The model's training_step, the loss traced: the same computation as the default step. */
static int32_t traced_step(const accel_tensor* const* batch, size_t count, accel_tensor** out_loss,
                           void* user_data) {
  Run* r = user_data;
  accel_tensor_list* out = NULL;
  double value = 0;
  /* TRAINER_MEMORY_ROWS=N: a batch of more than N rows runs out of memory from global step
   * TRAINER_OOM_FROM_STEP (default 0) on, as a device would (auto_find_batch_size). */
  if (getenv("TRAINER_MEMORY_ROWS")) {
    int64_t shape[2] = {0, 0}, step = 0;
    size_t dims = 0;
    if (accel_tensor_shape(batch[0], shape, 2, &dims) != ACCEL_OK) return 1;
    if (accel_trainer_global_step(r->trainer, &step) != ACCEL_OK) return 1;
    if (shape[0] > atol(getenv("TRAINER_MEMORY_ROWS")) &&
        step >= atol(getenv("TRAINER_OOM_FROM_STEP") ? getenv("TRAINER_OOM_FROM_STEP") : "0"))
      return ACCEL_ERR_OUT_OF_MEMORY;
  }
  if (accel_model_call(r->model, "training_step", batch, count, &out) != ACCEL_OK) return 1;
  if (accel_tensor_list_get(out, 0, out_loss) != ACCEL_OK) return 1;
  accel_tensor_list_free(out);
  if (accel_tensor_item_f64(*out_loss, &value) != ACCEL_OK) return 1;
  fprintf(r->trace, "micro %.9g\n", value);
  return 0;
}

static FILE* rank_file(const char* out, const char* name, int32_t rank) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof path, "%s/%s_%d.txt", out, name, rank);
  f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  return f;
}

static void trainer_run(Run* r, const char* out, const char* settings, int32_t rank) {
  accel_trainer* t = NULL;
  char* state = NULL;
  size_t size = 0;
  r->events = rank_file(out, "events", rank);
  r->trace = rank_file(out, "trace", rank);
  CHECK(accel_trainer_new(r->acc, r->model, r->opt, r->sched, r->train, r->eval, settings, &t));
  r->trainer = t;
  CHECK(accel_trainer_set_training_step(t, traced_step, r, NULL));
  CHECK(accel_trainer_add_callback(t, on_event, r, NULL));
  if (getenv("TRAINER_LOG_WITH")) CHECK(accel_init_trackers(r->acc, "trainer", NULL));
  CHECK(accel_trainer_train(t));
  if (getenv("TRAINER_LOG_WITH")) CHECK(accel_end_training(r->acc));
  {
    FILE* params = rank_file(out, "params", rank);
    dump_params(r->model, params);
    fclose(params);
  }
  accel_trainer_state_json(t, NULL, 0, &size);
  state = malloc(size);
  CHECK(accel_trainer_state_json(t, state, size, &size));
  if (rank == 0) {
    char path[4096];
    FILE* f;
    snprintf(path, sizeof path, "%s/trainer_state.json", out);
    f = fopen(path, "w");
    if (!f || fwrite(state, 1, size - 1, f) != size - 1) exit(1); /* without the NUL */
    fclose(f);
  }
  free(state);
  accel_trainer_free(t);
  fclose(r->events);
  fclose(r->trace);
}

/* compute_metrics giving the scripted scores of TRAINER_SCORES ("0.5,0.3,..."), one per
 * evaluation, as "score". */
static int32_t scripted_metrics(const accel_tensor* predictions, const accel_tensor* labels,
                                accel_values* metrics, void* user_data) {
  static int evaluation = 0;
  const char* list = getenv("TRAINER_SCORES");
  int k;
  (void)predictions;
  (void)labels;
  (void)user_data;
  if (!list) return 1;
  for (k = 0; k < evaluation && strchr(list, ','); ++k) list = strchr(list, ',') + 1;
  ++evaluation;
  return accel_values_set_number(metrics, "score", atof(list)) == ACCEL_OK ? 0 : 1;
}

/* The early-stopping run: train with SETTINGS and scripted scores, then evaluate once more; the
 * standalone evaluation's metrics go to OUT/evaluate.txt, the state to OUT/trainer_state.json. */
static void early_run(Run* r, const char* out, const char* settings) {
  accel_trainer* t = NULL;
  accel_values* metrics = NULL;
  char path[4096], *state;
  size_t i, n = 0, size = 0;
  FILE* f;
  CHECK(accel_trainer_new(r->acc, r->model, r->opt, r->sched, r->train, r->eval, settings, &t));
  CHECK(accel_trainer_set_compute_metrics(t, scripted_metrics, NULL, NULL));
  CHECK(accel_trainer_train(t));
  CHECK(accel_trainer_evaluate(t, &metrics));
  snprintf(path, sizeof path, "%s/evaluate.txt", out);
  f = fopen(path, "w");
  CHECK(accel_values_count(metrics, &n));
  for (i = 0; f && i < n; ++i) {
    const char* key = NULL;
    double v = 0;
    CHECK(accel_values_get(metrics, i, &key, NULL, &v, NULL));
    fprintf(f, "%s %.17g\n", key, v);
  }
  if (f) fclose(f);
  accel_values_free(metrics);
  accel_trainer_state_json(t, NULL, 0, &size);
  state = malloc(size);
  CHECK(accel_trainer_state_json(t, state, size, &size));
  snprintf(path, sizeof path, "%s/trainer_state.json", out);
  f = fopen(path, "w");
  if (!f || fwrite(state, 1, size - 1, f) != size - 1) exit(1); /* without the NUL */
  fclose(f);
  free(state);
  accel_trainer_free(t);
}

/* Every tensor of `m`, one "name value" line per element, into `f`. */
static void dump_params(const accel_model* m, FILE* f) {
  size_t i, count = 0;
  CHECK(accel_model_tensor_count(m, &count));
  for (i = 0; i < count; ++i) {
    char name[256];
    size_t size = 0;
    accel_tensor* v = NULL;
    int64_t n = 0, k;
    float* data;
    CHECK(accel_model_tensor_name(m, i, name, sizeof name, &size));
    CHECK(accel_model_tensor(m, name, &v));
    CHECK(accel_tensor_element_count(v, &n));
    data = malloc(sizeof(float) * (size_t)n);
    CHECK(accel_tensor_to_data(v, data, sizeof(float) * (size_t)n, &size));
    for (k = 0; k < n; ++k) fprintf(f, "%s %.9g\n", name, data[k]);
    free(data);
    accel_tensor_free(v);
  }
}

/* Ragged text for num_items_in_batch: 256 sequences of 3 to 20 tokens; labels are the next
 * token's id. */
static int32_t ragged_lengths(int64_t index, int64_t* lengths, size_t count, void* user_data) {
  (void)count;
  (void)user_data;
  lengths[0] = lengths[1] = 3 + (index * 7) % 18;
  return 0;
}

static int32_t ragged_sample(int64_t index, void* const* buffers, const size_t* sizes, size_t count,
                             void* user_data) {
  int64_t *ids = buffers[0], *labels = buffers[1];
  size_t t, n = sizes[0] / sizeof(int64_t);
  (void)count;
  (void)user_data;
  for (t = 0; t < n; ++t) {
    ids[t] = (index * 7 + (int64_t)t * 3) % 50;
    labels[t] = (ids[t] + 1 + index % 3) % 50;
  }
  return 0;
}

static const char kTextSource[] =
    "def training_step(self, ids, labels, items):\n"
    "    logits = self.fc.forward(self.emb.forward(ids))\n"
    "    return torch.cross_entropy_loss(logits.reshape([-1, 50]), labels.reshape([-1]), None, 2,"
    " -100, 0.0) / items\n";

/* The ragged run: BATCH per process, num_items_in_batch, SGD, one epoch (4 steps of 64 sequences
 * over all processes and micro-batches); the parameters to OUT/params_<rank>.txt and the logged
 * losses to OUT/trace_<rank>.txt. */
static void ragged_run(Run* r, const char* out, const char* batch, int32_t rank) {
  const accel_dtype dtypes[2] = {ACCEL_DTYPE_I64, ACCEL_DTYPE_I64};
  const size_t dim_counts[2] = {1, 1};
  const int64_t dims[2] = {ACCEL_RAGGED, ACCEL_RAGGED};
  accel_dataset* ds = NULL;
  accel_dataloader* text = NULL;
  accel_model* lm = NULL;
  accel_optimizer* sgd = NULL;
  accel_trainer* t = NULL;
  FILE* params = rank_file(out, "params", rank);
  r->events = rank_file(out, "events", rank);
  r->trace = rank_file(out, "trace", rank);
  CHECK(accel_dataset_from_ragged_callback(256, 2, dtypes, dim_counts, dims, ragged_lengths,
                                           ragged_sample, NULL, NULL, &ds));
  CHECK(accel_dataloader_new(r->acc, ds, &text));
  CHECK(accel_dataloader_set(text, "batch_size", batch));
  CHECK(accel_dataloader_set(text, "mask", "none"));
  CHECK(accel_dataloader_set_field(text, 1, "pad_value", "-100"));
  CHECK(accel_model_new(&lm));
  CHECK(accel_model_add_layer(lm, "emb", "embedding", "num_embeddings=50 embedding_dim=16"));
  CHECK(accel_model_add_layer(lm, "fc", "linear", "in_features=16 out_features=50"));
  CHECK(accel_model_define(lm, kTextSource));
  CHECK(accel_optimizer_new(lm, "sgd", &sgd));
  CHECK(accel_optimizer_set(sgd, "lr", "0.5"));
  CHECK(accel_trainer_new(r->acc, lm, sgd, NULL, text, NULL,
                          "num_items_in_batch=true,num_train_epochs=1,logging_steps=1,"
                          "save_strategy=no,speed_metrics=false,max_grad_norm=0",
                          &t));
  CHECK(accel_trainer_add_callback(t, on_event, r, NULL));
  CHECK(accel_trainer_train(t));
  dump_params(lm, params);
  accel_trainer_free(t);
  accel_optimizer_free(sgd);
  accel_model_free(lm);
  accel_dataloader_free(text);
  accel_dataset_free(ds);
  fclose(params);
  fclose(r->events);
  fclose(r->trace);
}

/* Predictions that say which sample they are: the model's `index` (x[:, 0]); labels y. */
static int32_t index_step(const accel_tensor* const* batch, size_t count, accel_tensor** out_loss,
                          accel_tensor** out_predictions, accel_tensor** out_labels,
                          void* user_data) {
  Run* r = user_data;
  accel_tensor_list* out = NULL;
  (void)out_loss;
  if (accel_model_call(r->model, "index", batch, count, &out) != ACCEL_OK) return 1;
  if (accel_tensor_list_get(out, 0, out_predictions) != ACCEL_OK) return 1;
  accel_tensor_list_free(out);
  *out_labels = (accel_tensor*)batch[1]; /* a batch handle may be given back as it is */
  return 0;
}

/* The events run: train (by default tests/mp/trainer_events.txt's run: 24 training samples, 10
 * for evaluation, batch 4, 2 micro-batches a step, 2 epochs), then evaluate and predict; each
 * event and its step on standard output. */
static void events_run(Run* r, const char* out, const char* extra, int train_n, int eval_n) {
  accel_trainer* t = NULL;
  char settings[4096];
  accel_dataloader_free(r->train);
  accel_dataloader_free(r->eval);
  r->train = loader(r->acc, train_n, 0);
  r->eval = loader(r->acc, eval_n, 0);
  r->events = stdout;
  snprintf(settings, sizeof settings, "speed_metrics=false,output_dir=%s/run,%s", out,
           extra ? extra
                 : "num_train_epochs=2,logging_steps=2,logging_first_step=true,eval_strategy=steps,"
                   "eval_steps=3,save_strategy=steps,save_steps=3,save_total_limit=2");
  CHECK(accel_trainer_new(r->acc, r->model, r->opt, r->sched, r->train, r->eval, settings, &t));
  CHECK(accel_trainer_add_callback(t, on_event, r, NULL));
  CHECK(accel_trainer_train(t));
  CHECK(accel_trainer_evaluate(t, NULL));
  CHECK(accel_trainer_predict(t, r->eval, NULL, NULL, NULL));
  accel_trainer_free(t);
}

static void predict_run(Run* r, const char* out, int32_t rank) {
  accel_trainer* t = NULL;
  accel_tensor* predictions = NULL;
  FILE* f = rank_file(out, "predict", rank);
  int64_t n = 0, i;
  CHECK(accel_trainer_new(r->acc, r->model, r->opt, r->sched, r->train, r->eval,
                          "speed_metrics=false", &t));
  CHECK(accel_trainer_set_eval_step(t, index_step, r, NULL));
  CHECK(accel_trainer_predict(t, r->eval, &predictions, NULL, NULL));
  CHECK(accel_tensor_element_count(predictions, &n));
  {
    float* v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    size_t size = 0;
    CHECK(accel_tensor_to_data(predictions, v, sizeof(float) * (size_t)n, &size));
    for (i = 0; i < n; ++i) fprintf(f, "%g\n", v[i]);
    free(v);
  }
  accel_tensor_free(predictions);
  accel_trainer_free(t);
  fclose(f);
}

int main(int argc, char** argv) {
  Run r;
  char dir[4096];
  int32_t rank = 0;
  memset(&r, 0, sizeof r);
  if (argc < 3) {
    fprintf(stderr, "usage: %s hand|trainer|predict OUT [ACCUMULATION [SETTINGS]]\n", argv[0]);
    return 2;
  }
  build(&r, argc > 3 ? argv[3] : "1", argv[2]);
  CHECK(accel_process_index(r.acc, &rank));
  if (strcmp(argv[1], "hand") == 0) {
    hand_loop(&r, argc > 4 ? atol(argv[4]) : 300);
  } else if (strcmp(argv[1], "trainer") == 0) {
    trainer_run(&r, argv[2], argc > 4 ? argv[4] : "", rank);
  } else if (strcmp(argv[1], "ragged") == 0) {
    ragged_run(&r, argv[2], argc > 4 ? argv[4] : "16", rank);
    goto done;
  } else if (strcmp(argv[1], "early") == 0) {
    early_run(&r, argv[2], argc > 4 ? argv[4] : "");
  } else if (strcmp(argv[1], "events") == 0) {
    events_run(&r, argv[2], argc > 4 ? argv[4] : NULL, argc > 5 ? atoi(argv[5]) : 24,
               argc > 6 ? atoi(argv[6]) : 10);
    goto done;
  } else if (strcmp(argv[1], "predict") == 0) {
    predict_run(&r, argv[2], rank);
    goto done;
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  snprintf(dir, sizeof dir, "%s/model", argv[2]);
  CHECK(accel_save_model(r.acc, r.model, dir, NULL));
done:
  accel_dataloader_free(r.train);
  accel_dataloader_free(r.eval);
  accel_scheduler_free(r.sched);
  accel_optimizer_free(r.opt);
  accel_model_free(r.model);
  accel_accelerator_free(r.acc);
  return 0;
}
