/* A two-rank training job for the stranger tests (stranger_suite.py): an MLP trained with SGD
 * for 120 steps on data made here, 25 ms apart, so that the job lives for a few seconds after its
 * process groups formed. Prints "ready" (rank 0) once every rank has taken part in a collective,
 * and at the end a hash of the parameters, which every rank holds bitwise alike (checked). Exits
 * nonzero on any failure. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"

static int g_rank;

#define CHECK(call)                                                                          \
  do {                                                                                       \
    accel_status st_ = (call);                                                               \
    if (st_ != ACCEL_OK) {                                                                   \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, accel_status_name(st_), \
              accel_last_error_message());                                                   \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static accel_tensor* make(const void* data, accel_dtype dt, const int64_t* shape, size_t ndim) {
  size_t n = accel_dtype_size(dt), i;
  accel_tensor* t = NULL;
  for (i = 0; i < ndim; ++i) n *= (size_t)shape[i];
  CHECK(accel_tensor_from_data(data, n, dt, shape, ndim, &t));
  return t;
}

static accel_dataloader* make_data(accel_accelerator* acc, accel_dataset** ds) {
  enum { kSamples = 960, kFeatures = 20 };
  static float x[kSamples * kFeatures];
  static int64_t y[kSamples];
  int64_t shape[2] = {kSamples, kFeatures}, i, j;
  accel_tensor *tx, *ty;
  const accel_tensor* fields[2];
  accel_dataloader* dl;
  for (i = 0; i < kSamples; ++i) {
    for (j = 0; j < kFeatures; ++j)
      x[i * kFeatures + j] = (float)((i * 7 + j * 13) % 17) / 17.0f - 0.5f;
    y[i] = (i * 3) % 4;
  }
  tx = make(x, ACCEL_DTYPE_F32, shape, 2);
  ty = make(y, ACCEL_DTYPE_I64, shape, 1);
  fields[0] = tx;
  fields[1] = ty;
  CHECK(accel_dataset_from_tensors(fields, 2, ds));
  accel_tensor_free(tx);
  accel_tensor_free(ty);
  CHECK(accel_dataloader_new(acc, *ds, &dl));
  CHECK(accel_dataloader_set(dl, "batch_size", "16"));
  return dl;
}

/* FNV-1a over every parameter, gathered from every rank; the ranks' copies must be equal. */
static uint64_t params_hash(accel_accelerator* acc, accel_model* model) {
  uint64_t h = 1469598103934665603ULL;
  size_t count = 0, i, k, size = 0;
  CHECK(accel_model_tensor_count(model, &count));
  for (i = 0; i < count; ++i) {
    char name[128];
    size_t len = 0, bytes = 0, total = 0;
    accel_tensor *t, *all;
    unsigned char* v;
    int64_t r;
    CHECK(accel_model_tensor_name(model, i, name, sizeof name, &len));
    CHECK(accel_model_tensor(model, name, &t));
    CHECK(accel_tensor_data_size(t, &bytes));
    CHECK(accel_gather(acc, t, &all));
    CHECK(accel_tensor_data_size(all, &total));
    v = malloc(total);
    CHECK(accel_tensor_to_data(all, v, total, &size));
    for (r = 1; r < (int64_t)(total / bytes); ++r)
      if (memcmp(v, v + r * (int64_t)bytes, bytes) != 0) {
        fprintf(stderr, "rank %d: %s differs on rank %lld\n", g_rank, name, (long long)r);
        exit(1);
      }
    for (k = 0; k < bytes; ++k) h = (h ^ v[k]) * 1099511628211ULL;
    free(v);
    accel_tensor_free(all);
    accel_tensor_free(t);
  }
  return h;
}

int main(void) {
  accel_accelerator* acc = NULL;
  accel_dataset* ds = NULL;
  accel_dataloader* dl;
  accel_model* model;
  accel_optimizer* opt;
  void* objects[3];
  const struct timespec pause = {0, 25 * 1000 * 1000};
  int epoch, steps = 0;
  const char* rank = getenv("RANK");
  g_rank = rank ? atoi(rank) : 0;

  CHECK(accel_init(NULL, &acc));
  dl = make_data(acc, &ds);
  CHECK(accel_set_seed(acc, 7, false));
  CHECK(accel_model_new(&model));
  CHECK(accel_model_add_layer(model, "fc1", "linear", "in_features=20 out_features=32"));
  CHECK(accel_model_add_layer(model, "fc2", "linear", "in_features=32 out_features=4"));
  CHECK(accel_model_define(model,
                           "def training_step(self, x, y):\n"
                           "    out = self.fc2.forward(torch.relu(self.fc1.forward(x)))\n"
                           "    return torch.cross_entropy_loss(out, y)\n"));
  CHECK(accel_optimizer_new(model, "sgd", &opt));
  CHECK(accel_optimizer_set(opt, "lr", "0.05"));
  objects[0] = model;
  objects[1] = opt;
  objects[2] = dl;
  CHECK(accel_prepare(acc, objects, 3));
  params_hash(acc, model); /* a collective: every rank's groups are up */
  if (g_rank == 0) {
    printf("ready\n");
    fflush(stdout);
  }
  for (epoch = 0; epoch < 4; ++epoch) {
    for (;;) {
      accel_tensor *f[2], *loss;
      accel_tensor_list* out = NULL;
      size_t fields = 0;
      CHECK(accel_dataloader_next(dl, f, 2, &fields));
      if (fields == 0) break;
      CHECK(accel_model_call(model, "training_step", (const accel_tensor* const*)f, 2, &out));
      CHECK(accel_tensor_list_get(out, 0, &loss));
      accel_tensor_list_free(out);
      CHECK(accel_backward(acc, loss));
      CHECK(accel_optimizer_step(opt));
      CHECK(accel_optimizer_zero_grad(opt));
      accel_tensor_free(loss);
      accel_tensor_free(f[0]);
      accel_tensor_free(f[1]);
      nanosleep(&pause, NULL);
      ++steps;
    }
  }
  {
    const uint64_t h = params_hash(acc, model);
    if (g_rank == 0) printf("steps %d params %016llx\n", steps, (unsigned long long)h);
  }
  accel_optimizer_free(opt);
  accel_model_free(model);
  accel_dataloader_free(dl);
  accel_dataset_free(ds);
  accel_accelerator_free(acc);
  return 0;
}
