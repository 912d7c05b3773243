// The Trainer's evaluation and prediction loops: every sample once over the processes
// (gather_for_metrics), in dataset order, the loss repeated per sample as transformers does.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "accelerator/accelerator.hpp"
#include "common/error.hpp"
#include "data/loader.hpp"
#include "model/model.hpp"
#include "ops/collectives.hpp"
#include "prepare/session.hpp"
#include "trainer/trainer.hpp"
#include "trainer/trainer_loop.hpp"

namespace accel::trainer {

struct Trainer::Gathered {
  at::Tensor predictions, labels, losses;
  long long samples = 0;
};

namespace {

at::Tensor cat_or_none(const std::vector<at::Tensor>& parts) {
  return parts.empty() ? at::Tensor() : at::cat(parts);
}

}  // namespace

Trainer::Gathered Trainer::run_evaluation(data::DataLoader& loader) {
  auto& rt = acc_.runtime();
  auto gather = [&](const at::Tensor& t) {
    return ops::gather_for_metrics(rt.communicator(), t.detach().contiguous(),
                                   *rt.gradient_state());
  };
  objects_.model->train(false);
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> predictions, labels, losses, batch;
  while (loader.next(batch)) {
    const EvalOutput out = steps_.eval_step(batch);
    const int64_t rows = !batch.empty() && batch[0].dim() > 0 ? batch[0].size(0) : 1;
    if (out.loss.defined()) {
      if (out.loss.numel() != 1)
        fail(Errc::invalid_argument, "trainer: the evaluation step's loss must be one number");
      losses.push_back(gather(out.loss.to(at::kFloat).reshape({1}).expand({rows})));
    }
    if (out.predictions.defined()) predictions.push_back(gather(out.predictions));
    if (out.labels.defined()) labels.push_back(gather(out.labels));
    emit(Event::prediction_step);
  }
  Gathered g{cat_or_none(predictions), cat_or_none(labels), cat_or_none(losses)};
  const at::Tensor& any = g.predictions.defined() ? g.predictions
                          : g.labels.defined()    ? g.labels
                                                  : g.losses;
  g.samples = any.defined() ? any.size(0) : 0;
  return g;
}

Metrics Trainer::metrics_of(const Gathered& g, const std::string& prefix) const {
  Metrics m;
  if (steps_.compute_metrics && g.predictions.defined() && g.labels.defined())
    m = steps_.compute_metrics(g.predictions, g.labels);
  if (g.losses.defined()) m[prefix + "_loss"] = g.losses.mean().item<float>();
  Metrics prefixed;
  for (auto& [k, v] : m) prefixed[k.rfind(prefix + "_", 0) == 0 ? k : prefix + "_" + k] = v;
  return prefixed;
}

Metrics Trainer::evaluate() {
  if (!objects_.eval)
    fail(Errc::invalid_argument, "trainer: evaluate needs an evaluation dataloader");
  const double start = seconds_now();
  const Gathered g = run_evaluation(*objects_.eval);
  Metrics m = metrics_of(g, "eval");
  if (args_.speed_metrics) {
    const double global_batch =
        static_cast<double>(objects_.eval->batch_size()) * acc_.runtime().place().world_size;
    add_speed_metrics(m, "eval", start, static_cast<double>(g.samples),
                      std::ceil(static_cast<double>(g.samples) / global_batch));
  }
  log(m);
  emit(Event::evaluate, &m);
  return m;
}

Prediction Trainer::predict(data::DataLoader& loader) {
  bool prepared = false;
  for (const auto& l : acc_.session().dataloaders()) prepared = prepared || l.get() == &loader;
  if (!prepared)
    fail(Errc::state, "trainer: predict's dataloader must be prepared on this accelerator");
  const double start = seconds_now();
  Gathered g = run_evaluation(loader);
  Prediction p{g.predictions, g.labels, metrics_of(g, "test")};
  if (args_.speed_metrics) {
    const double global_batch =
        static_cast<double>(loader.batch_size()) * acc_.runtime().place().world_size;
    add_speed_metrics(p.metrics, "test", start, static_cast<double>(g.samples),
                      std::ceil(static_cast<double>(g.samples) / global_batch));
  }
  emit(Event::predict, &p.metrics);
  return p;
}

}  // namespace accel::trainer
