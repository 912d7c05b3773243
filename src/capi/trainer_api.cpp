// accel_trainer_*: the Trainer (src/trainer/trainer.hpp) behind the C ABI; the program's
// callbacks wrapped as the core's std::functions.
#include <ATen/ATen.h>

#include <cstring>

#include "capi/handles.hpp"
#include "trainer/trainer.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

namespace {

// Calls a release callback once, when the registration is gone (armed by setting `fn` once the
// registering call can no longer fail).
struct Release {
  explicit Release(void* data) : user_data(data) {}
  Release(const Release&) = delete;
  Release& operator=(const Release&) = delete;
  ~Release() {
    if (fn) fn(user_data);
  }
  accel_release_fn fn = nullptr;
  void* user_data;
};
using Registration = std::shared_ptr<Release>;

}  // namespace

// The accelerator's family lock guards the Trainer, as it guards the prepared objects.
struct accel_trainer {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kTrainer);
  accel_accelerator* accelerator = nullptr;
  std::weak_ptr<void> accelerator_alive;
  std::shared_ptr<accel::capi::Family> family;
  // Released after `core` is gone (declared before it), so never while it may call them.
  std::vector<Registration> callbacks;
  Registration training_step, eval_step, compute_metrics;
  std::unique_ptr<accel::trainer::Trainer> core;
  bool init_end_sent = false;
};

namespace accel::capi {
template <>
inline Tag tag_of<accel_trainer>() {
  return Tag::kTrainer;
}
}  // namespace accel::capi

namespace {

accel::trainer::Trainer& live(const accel_trainer* t) {
  if (t->accelerator_alive.expired())
    fail(Errc::state, "the accelerator of this trainer has been freed");
  return *t->core;
}

void check_rc(int32_t rc, const std::string& what) {
  // Running out of memory stays itself: auto_find_batch_size tries again smaller.
  if (rc == ACCEL_ERR_OUT_OF_MEMORY) accel::capi::fail_with_returned(rc, what);
  if (rc != 0) fail(Errc::callback, what + " returned " + std::to_string(rc));
}

// The batch as handles that live for the call.
struct BatchHandles {
  std::vector<accel_tensor> tensors;
  std::vector<const accel_tensor*> pointers;
  explicit BatchHandles(const std::vector<at::Tensor>& batch) : tensors(batch.size()) {
    for (size_t i = 0; i < batch.size(); ++i) {
      tensors[i].tensor = batch[i];
      pointers.push_back(&tensors[i]);
    }
  }
};

// Takes a tensor handle the program returned (it is ours to free; one of the batch's handles,
// which the library owns, is read, not freed).
at::Tensor adopt(accel_tensor* t, const char* what, const BatchHandles& batch) {
  if (!t) return {};
  for (const auto* b : batch.pointers)
    if (b == t) return t->tensor;
  std::unique_ptr<accel_tensor> owned(checked(t, what));
  at::Tensor out = std::move(owned->tensor);
  const uint32_t freed = static_cast<uint32_t>(accel::capi::Tag::kFreed);
  std::memcpy(static_cast<void*>(owned.get()), &freed, sizeof freed);
  return out;
}

accel_values values_of(const accel::trainer::Metrics& m) {
  accel_values v;
  for (const auto& [k, x] : m) v.values.push_back({k, false, x, ""});
  return v;
}

void send_init_end(accel_trainer* t) {
  if (t->init_end_sent) return;
  t->init_end_sent = true;
  live(t).init_end();
}

bool* control_flag(accel::trainer::TrainerControl& c, const char* flag) {
  require(flag, "flag");
  const std::string f = flag;
  if (f == "should_training_stop") return &c.should_training_stop;
  if (f == "should_epoch_stop") return &c.should_epoch_stop;
  if (f == "should_save") return &c.should_save;
  if (f == "should_evaluate") return &c.should_evaluate;
  if (f == "should_log") return &c.should_log;
  fail(Errc::invalid_argument, "unknown control flag '" + f +
                                   "'; known: should_training_stop, should_epoch_stop, "
                                   "should_save, should_evaluate, should_log");
}

// Prepares what is not prepared yet, as accel_prepare does (the handles adopt the session).
void prepare_objects(accel_accelerator* acc, std::vector<void*> objects) {
  const accel_status st = accel_prepare(acc, objects.data(), objects.size());
  if (st != ACCEL_OK) fail(static_cast<Errc>(st), accel_last_error_message());
}

}  // namespace

extern "C" {

ACCEL_API const char* accel_trainer_event_name(accel_trainer_event event) {
  if (event < 0 || event >= accel::trainer::kEventCount) return nullptr;
  return accel::trainer::event_name(static_cast<accel::trainer::Event>(event));
}

ACCEL_API accel_status accel_trainer_new(accel_accelerator* accelerator, accel_model* model,
                                         accel_optimizer* optimizer, accel_scheduler* scheduler,
                                         accel_dataloader* train, accel_dataloader* eval,
                                         const char* settings, accel_trainer** out) {
  return guarded([&] {
    auto& acc = accel::capi::core_of(accelerator);
    checked(model, "model");
    checked(optimizer, "optimizer");
    if (scheduler) checked(scheduler, "scheduler");
    checked(train, "train");
    if (eval) checked(eval, "eval");
    require(out, "out");
    std::vector<void*> objects{model, optimizer};
    if (scheduler) objects.push_back(scheduler);
    objects.push_back(train);
    if (eval) objects.push_back(eval);
    prepare_objects(accelerator, objects);
    FamilyLock lock(accelerator->family);
    auto t = std::make_unique<accel_trainer>();
    t->accelerator = accelerator;
    t->accelerator_alive = accelerator->alive;
    t->family = accelerator->family;
    accel::trainer::Objects o{model->model, optimizer->optimizer,
                              scheduler ? scheduler->scheduler : nullptr, train->loader,
                              eval ? eval->loader : nullptr};
    t->core = std::make_unique<accel::trainer::Trainer>(acc, std::move(o), settings ? settings : "",
                                                        accel::trainer::Steps{});
    *out = t.release();
  });
}

ACCEL_API accel_status accel_trainer_set_training_step(accel_trainer* trainer,
                                                       accel_training_step_fn step, void* user_data,
                                                       accel_release_fn release) {
  return guarded([&] {
    checked(trainer, "trainer");
    FamilyLock lock(trainer->family);
    auto& core = live(trainer);
    auto reg = std::make_shared<Release>(user_data);
    std::function<at::Tensor(const std::vector<at::Tensor>&)> fn;
    if (step)
      fn = [step, user_data](const std::vector<at::Tensor>& batch) {
        BatchHandles h(batch);
        accel_tensor* loss = nullptr;
        const int32_t rc = step(h.pointers.data(), h.pointers.size(), &loss, user_data);
        at::Tensor taken = adopt(loss, "the training step's loss", h);  // freed even on failure
        check_rc(rc, "the training step");
        if (!taken.defined()) fail(Errc::invalid_argument, "the training step gave no loss");
        return taken;
      };
    core.set_training_step(std::move(fn));
    trainer->training_step = reg;
    reg->fn = release;
  });
}

ACCEL_API accel_status accel_trainer_set_eval_step(accel_trainer* trainer, accel_eval_step_fn step,
                                                   void* user_data, accel_release_fn release) {
  return guarded([&] {
    checked(trainer, "trainer");
    FamilyLock lock(trainer->family);
    auto& core = live(trainer);
    auto reg = std::make_shared<Release>(user_data);
    std::function<accel::trainer::EvalOutput(const std::vector<at::Tensor>&)> fn;
    if (step)
      fn = [step, user_data](const std::vector<at::Tensor>& batch) {
        BatchHandles h(batch);
        accel_tensor *loss = nullptr, *predictions = nullptr, *labels = nullptr;
        const int32_t rc =
            step(h.pointers.data(), h.pointers.size(), &loss, &predictions, &labels, user_data);
        accel::trainer::EvalOutput out{adopt(loss, "the evaluation step's loss", h),
                                       adopt(predictions, "the evaluation step's predictions", h),
                                       adopt(labels, "the evaluation step's labels", h)};
        check_rc(rc, "the evaluation step");
        return out;
      };
    core.set_eval_step(std::move(fn));
    trainer->eval_step = reg;
    reg->fn = release;
  });
}

ACCEL_API accel_status accel_trainer_set_compute_metrics(accel_trainer* trainer,
                                                         accel_compute_metrics_fn fn,
                                                         void* user_data,
                                                         accel_release_fn release) {
  return guarded([&] {
    checked(trainer, "trainer");
    FamilyLock lock(trainer->family);
    auto& core = live(trainer);
    auto reg = std::make_shared<Release>(user_data);
    std::function<accel::trainer::Metrics(const at::Tensor&, const at::Tensor&)> f;
    if (fn)
      f = [fn, user_data](const at::Tensor& predictions, const at::Tensor& labels) {
        accel_tensor p, l;
        p.tensor = predictions;
        l.tensor = labels;
        accel_values v;
        check_rc(fn(&p, &l, &v, user_data), "compute_metrics");
        accel::trainer::Metrics m;
        for (const auto& value : v.values) {
          if (value.is_text)
            fail(Errc::invalid_argument, "compute_metrics: metric '" + value.key + "' is a text");
          m[value.key] = value.number;
        }
        return m;
      };
    core.set_compute_metrics(std::move(f));
    trainer->compute_metrics = reg;
    reg->fn = release;
  });
}

ACCEL_API accel_status accel_trainer_add_callback(accel_trainer* trainer,
                                                  accel_trainer_callback_fn callback,
                                                  void* user_data, accel_release_fn release) {
  return guarded([&] {
    checked(trainer, "trainer");
    if (!callback) fail(Errc::invalid_argument, "callback is NULL");
    FamilyLock lock(trainer->family);
    auto& core = live(trainer);
    core.add_callback([trainer, callback, user_data](
                          accel::trainer::Event e, const accel::trainer::TrainerState&,
                          accel::trainer::TrainerControl&, const accel::trainer::Metrics* values) {
      accel_values v;
      if (values) v = values_of(*values);
      check_rc(
          callback(trainer, static_cast<accel_trainer_event>(e), values ? &v : nullptr, user_data),
          std::string("a trainer callback at ") + accel::trainer::event_name(e));
    });
    trainer->callbacks.push_back(std::make_shared<Release>(user_data));
    trainer->callbacks.back()->fn = release;
  });
}

ACCEL_API accel_status accel_trainer_train(accel_trainer* trainer) {
  return guarded([&] {
    checked(trainer, "trainer");
    FamilyLock lock(trainer->family);
    send_init_end(trainer);
    live(trainer).train();
  });
}

ACCEL_API accel_status accel_trainer_evaluate(accel_trainer* trainer, accel_values** out_metrics) {
  return guarded([&] {
    checked(trainer, "trainer");
    FamilyLock lock(trainer->family);
    send_init_end(trainer);
    const auto metrics = live(trainer).evaluate();
    if (out_metrics) *out_metrics = new accel_values(values_of(metrics));
  });
}

ACCEL_API accel_status accel_trainer_predict(accel_trainer* trainer, accel_dataloader* loader,
                                             accel_tensor** out_predictions,
                                             accel_tensor** out_labels,
                                             accel_values** out_metrics) {
  return guarded([&] {
    checked(trainer, "trainer");
    checked(loader, "loader");
    FamilyLock lock(trainer->family);
    send_init_end(trainer);
    auto p = live(trainer).predict(*loader->loader);
    std::unique_ptr<accel_values> metrics(new accel_values(values_of(p.metrics)));
    accel_tensor* predictions =
        p.predictions.defined() ? accel::capi::new_tensor(std::move(p.predictions)) : nullptr;
    accel_tensor* labels =
        p.labels.defined() ? accel::capi::new_tensor(std::move(p.labels)) : nullptr;
    if (out_predictions)
      *out_predictions = predictions;
    else if (predictions)
      accel_tensor_free(predictions);
    if (out_labels)
      *out_labels = labels;
    else if (labels)
      accel_tensor_free(labels);
    if (out_metrics) *out_metrics = metrics.release();
  });
}

ACCEL_API accel_status accel_trainer_state_json(const accel_trainer* trainer, char* buf,
                                                size_t capacity, size_t* out_size) {
  return guarded([&] {
    checked(trainer, "trainer");
    std::string text;
    {
      FamilyLock lock(trainer->family);
      text = live(trainer).state().to_json();
    }
    accel::capi::write_text(text, buf, capacity, out_size);
  });
}

ACCEL_API accel_status accel_trainer_global_step(const accel_trainer* trainer, int64_t* out) {
  return accel::capi::locked_query(trainer, "trainer", out, [](const accel_trainer& t) {
    return static_cast<int64_t>(live(&t).state().global_step);
  });
}

ACCEL_API accel_status accel_trainer_epoch(const accel_trainer* trainer, double* out) {
  return accel::capi::locked_query(trainer, "trainer", out, [](const accel_trainer& t) {
    const auto& e = live(&t).state().epoch;
    return e ? e->value() : 0.0;
  });
}

ACCEL_API accel_status accel_trainer_control(const accel_trainer* trainer, const char* flag,
                                             bool* out) {
  return guarded([&] {
    checked(trainer, "trainer");
    require(out, "out");
    FamilyLock lock(trainer->family);
    *out = *control_flag(live(trainer).control(), flag);
  });
}

ACCEL_API accel_status accel_trainer_set_control(accel_trainer* trainer, const char* flag,
                                                 bool value) {
  return guarded([&] {
    checked(trainer, "trainer");
    FamilyLock lock(trainer->family);
    *control_flag(live(trainer).control(), flag) = value;
  });
}

ACCEL_API void accel_trainer_free(accel_trainer* trainer) {
  accel::capi::free_handle(trainer, "trainer");
}

}  // extern "C"
