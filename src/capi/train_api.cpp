// accel_model_*, accel_optimizer_*, accel_scheduler_*, accel_prepare, accel_accumulate,
// accel_backward and clipping.
#include "capi/handles.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::guarded;
using accel::capi::require;

namespace {

// The session an object was prepared with (null when never prepared); an error once its
// accelerator is gone.
template <class Handle>
std::shared_ptr<accel::prepare::Session> live_session(const Handle* h) {
  if (!h->prepared) return nullptr;
  auto s = h->session.lock();
  if (!s) fail(Errc::state, "the accelerator this object was prepared with has been freed");
  return s;
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_model_new(accel_model** out) {
  return guarded([&] {
    require(out, "out");
    auto h = std::make_unique<accel_model>();
    h->model = std::make_shared<accel::model::Model>();
    *out = h.release();
  });
}

ACCEL_API accel_status accel_model_load(const char* path, accel_model** out) {
  return guarded([&] {
    require(path, "path");
    require(out, "out");
    auto h = std::make_unique<accel_model>();
    h->model = accel::model::Model::load(path);
    *out = h.release();
  });
}

ACCEL_API accel_status accel_model_add_layer(accel_model* model, const char* name, const char* kind,
                                             const char* spec) {
  return guarded([&] {
    checked(model, "model");
    require(name, "name");
    require(kind, "kind");
    if (model->prepared) fail(Errc::state, "layers cannot be added to a prepared model");
    model->model->add_layer(name, kind, spec ? spec : "");
  });
}

ACCEL_API accel_status accel_model_define(accel_model* model, const char* source) {
  return guarded([&] {
    checked(model, "model");
    require(source, "source");
    model->model->define(source);
  });
}

ACCEL_API accel_status accel_model_call(accel_model* model, const char* method,
                                        const accel_tensor* const* inputs, size_t count,
                                        accel_tensor** outputs, size_t capacity,
                                        size_t* out_count) {
  return guarded([&] {
    checked(model, "model");
    require(method, "method");
    require(out_count, "out_count");
    if (count > 0) require(inputs, "inputs");
    std::vector<at::Tensor> in;
    for (size_t i = 0; i < count; ++i)
      in.push_back(checked(inputs[i], ("inputs[" + std::to_string(i) + "]").c_str())->tensor);
    auto session = live_session(model);
    auto results =
        session ? session->call(*model->model, method, in) : model->model->call(method, in);
    if (results.size() > capacity)
      fail(Errc::buffer_too_small,
           "'" + std::string(method) + "' returned " + std::to_string(results.size()) +
               " tensors; outputs has room for " + std::to_string(capacity));
    if (!results.empty()) require(outputs, "outputs");
    std::vector<std::unique_ptr<accel_tensor>> made;
    for (auto& t : results) made.emplace_back(accel::capi::new_tensor(std::move(t)));
    for (size_t i = 0; i < made.size(); ++i) outputs[i] = made[i].release();
    *out_count = made.size();
  });
}

ACCEL_API accel_status accel_model_train(accel_model* model, bool training) {
  return guarded([&] { checked(model, "model")->model->train(training); });
}

ACCEL_API accel_status accel_model_num_parameters(const accel_model* model, int64_t* out) {
  return guarded([&] {
    checked(model, "model");
    require(out, "out");
    *out = model->model->num_parameters();
  });
}

namespace {
std::vector<std::pair<std::string, at::Tensor>> named_tensors(const accel_model* m) {
  auto all = m->model->named_parameters();
  for (auto& b : m->model->named_buffers()) all.push_back(std::move(b));
  return all;
}
}  // namespace

ACCEL_API accel_status accel_model_tensor_count(const accel_model* model, size_t* out) {
  return guarded([&] {
    checked(model, "model");
    require(out, "out");
    *out = named_tensors(model).size();
  });
}

ACCEL_API accel_status accel_model_tensor_name(const accel_model* model, size_t index, char* buf,
                                               size_t capacity, size_t* out_size) {
  return guarded([&] {
    checked(model, "model");
    const auto all = named_tensors(model);
    if (index >= all.size())
      fail(Errc::invalid_argument, "index " + std::to_string(index) + " is out of range (" +
                                       std::to_string(all.size()) + " tensors)");
    accel::capi::write_text(all[index].first, buf, capacity, out_size);
  });
}

ACCEL_API accel_status accel_model_tensor(const accel_model* model, const char* name,
                                          accel_tensor** out) {
  return guarded([&] {
    checked(model, "model");
    require(name, "name");
    require(out, "out");
    for (const auto& [n, t] : named_tensors(model))
      if (n == name) {
        *out = accel::capi::new_tensor(t.detach().clone());
        return;
      }
    fail(Errc::invalid_argument,
         "the model has no parameter or buffer '" + std::string(name) + "'");
  });
}

ACCEL_API accel_status accel_model_save(const accel_model* model, const char* path) {
  return guarded([&] {
    checked(model, "model");
    require(path, "path");
    model->model->save(path);
  });
}

ACCEL_API void accel_model_free(accel_model* model) {
  accel::capi::free_handle(model, "model");
}

ACCEL_API accel_status accel_optimizer_new(accel_model* model, const char* kind,
                                           accel_optimizer** out) {
  return guarded([&] {
    checked(model, "model");
    require(kind, "kind");
    require(out, "out");
    auto h = std::make_unique<accel_optimizer>();
    h->optimizer = std::make_shared<accel::optim::Optimizer>(kind);
    h->model = model->model;
    *out = h.release();
  });
}

ACCEL_API accel_status accel_optimizer_set(accel_optimizer* optimizer, const char* key,
                                           const char* value) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    require(key, "key");
    require(value, "value");
    optimizer->optimizer->set(key, value);
  });
}

namespace {
// An optimizer used without accel_prepare binds to its model's parameters on first use.
void bind_if_needed(accel_optimizer* o) {
  if (o->optimizer->bound()) return;
  std::vector<at::Tensor> params;
  for (const auto& [n, p] : o->model->named_parameters())
    if (p.requires_grad()) params.push_back(p);
  o->optimizer->bind(std::move(params));
}
}  // namespace

ACCEL_API accel_status accel_optimizer_step(accel_optimizer* optimizer) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    auto session = live_session(optimizer);
    if (session) {
      session->optimizer_step(*optimizer->optimizer);
    } else {
      bind_if_needed(optimizer);
      optimizer->optimizer->step();
    }
  });
}

ACCEL_API accel_status accel_optimizer_zero_grad(accel_optimizer* optimizer) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    auto session = live_session(optimizer);
    if (session) {
      session->optimizer_zero_grad(*optimizer->optimizer);
    } else {
      bind_if_needed(optimizer);
      optimizer->optimizer->zero_grad();
    }
  });
}

ACCEL_API accel_status accel_optimizer_lr(const accel_optimizer* optimizer, double* out) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    require(out, "out");
    *out = optimizer->optimizer->lr();
  });
}

ACCEL_API accel_status accel_optimizer_set_lr(accel_optimizer* optimizer, double lr) {
  return guarded([&] { checked(optimizer, "optimizer")->optimizer->set_lr(lr); });
}

ACCEL_API accel_status accel_optimizer_step_was_skipped(const accel_optimizer* optimizer,
                                                        bool* out) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    require(out, "out");
    auto session = live_session(optimizer);
    *out = session && session->step_was_skipped(*optimizer->optimizer);
  });
}

ACCEL_API void accel_optimizer_free(accel_optimizer* optimizer) {
  accel::capi::free_handle(optimizer, "optimizer");
}

ACCEL_API accel_status accel_scheduler_new(accel_optimizer* optimizer, const char* kind,
                                           accel_scheduler** out) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    require(kind, "kind");
    require(out, "out");
    auto h = std::make_unique<accel_scheduler>();
    h->scheduler = std::make_shared<accel::optim::LrScheduler>(accel::optim::Schedule(kind),
                                                               optimizer->optimizer);
    *out = h.release();
  });
}

ACCEL_API accel_status accel_scheduler_set(accel_scheduler* scheduler, const char* key,
                                           const char* value) {
  return guarded([&] {
    checked(scheduler, "scheduler");
    require(key, "key");
    require(value, "value");
    scheduler->scheduler->set(key, value);
  });
}

ACCEL_API accel_status accel_scheduler_step(accel_scheduler* scheduler) {
  return guarded([&] {
    checked(scheduler, "scheduler");
    auto session = live_session(scheduler);
    if (session)
      session->scheduler_step(*scheduler->scheduler);
    else
      scheduler->scheduler->step();
  });
}

ACCEL_API accel_status accel_scheduler_lr(const accel_scheduler* scheduler, double* out) {
  return guarded([&] {
    checked(scheduler, "scheduler");
    require(out, "out");
    *out = scheduler->scheduler->lr();
  });
}

ACCEL_API void accel_scheduler_free(accel_scheduler* scheduler) {
  accel::capi::free_handle(scheduler, "scheduler");
}

ACCEL_API accel_status accel_prepare(accel_accelerator* accelerator, void* const* objects,
                                     size_t count) {
  return guarded([&] {
    auto* acc = checked(accelerator, "accelerator");
    if (count > 0) require(objects, "objects");
    // Sort by kind first (every handle starts with its tag), so nothing is half-prepared when an
    // argument is bad.
    std::vector<accel_model*> models;
    std::vector<accel_optimizer*> optimizers;
    std::vector<accel_scheduler*> schedulers;
    std::vector<accel_dataloader*> loaders;
    for (size_t i = 0; i < count; ++i) {
      const std::string param = "objects[" + std::to_string(i) + "]";
      if (!objects[i]) fail(Errc::invalid_argument, param + " is NULL");
      uint32_t tag = 0;
      std::memcpy(&tag, objects[i], sizeof tag);
      switch (static_cast<accel::capi::Tag>(tag)) {
        case accel::capi::Tag::kModel:
          models.push_back(static_cast<accel_model*>(objects[i]));
          break;
        case accel::capi::Tag::kOptimizer:
          optimizers.push_back(static_cast<accel_optimizer*>(objects[i]));
          break;
        case accel::capi::Tag::kScheduler:
          schedulers.push_back(static_cast<accel_scheduler*>(objects[i]));
          break;
        case accel::capi::Tag::kDataloader:  // sharded when it was made; tracked for save_state
          loaders.push_back(static_cast<accel_dataloader*>(objects[i]));
          break;
        default:
          fail(Errc::wrong_handle, param + " is " + accel::capi::tag_name(tag) +
                                       "; accel_prepare takes models, optimizers, schedulers and "
                                       "dataloaders");
      }
    }
    auto& session = *acc->session;
    const bool placement = acc->impl->settings().flag("device_placement");
    auto prepared_here = [&](const std::shared_ptr<accel::model::Model>& m) {
      for (auto* h : models)
        if (h->model == m) return true;
      return session.is_prepared(m.get());
    };
    for (auto* o : optimizers)
      if (!prepared_here(o->model))
        fail(Errc::state,
             "an optimizer's model is neither prepared nor among the objects: pass the "
             "model to accel_prepare too");
    for (auto* m : models) {
      session.prepare_model(m->model, placement);
      m->session = acc->session;
      m->prepared = true;
    }
    for (auto* o : optimizers) {
      session.prepare_optimizer(o->optimizer, o->model);
      o->session = acc->session;
      o->prepared = true;
    }
    for (auto* l : loaders) session.prepare_dataloader(l->loader);
    for (auto* s : schedulers) {
      session.prepare_scheduler(s->scheduler);
      s->session = acc->session;
      s->prepared = true;
    }
  });
}

ACCEL_API accel_status accel_accumulate(accel_accelerator* accelerator) {
  return guarded([&] { checked(accelerator, "accelerator")->session->accumulate(); });
}

ACCEL_API accel_status accel_sync_gradients(const accel_accelerator* accelerator, bool* out) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    require(out, "out");
    *out = accelerator->session->sync_gradients();
  });
}

ACCEL_API accel_status accel_backward(accel_accelerator* accelerator, const accel_tensor* loss) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    checked(loss, "loss");
    accelerator->session->backward(loss->tensor);
  });
}

ACCEL_API accel_status accel_clip_grad_norm(accel_accelerator* accelerator, accel_model* model,
                                            double max_norm, double norm_type, double* out_norm) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    checked(model, "model");
    const double norm = accelerator->session->clip_grad_norm(*model->model, max_norm, norm_type);
    if (out_norm) *out_norm = norm;
  });
}

ACCEL_API accel_status accel_clip_grad_value(accel_accelerator* accelerator, accel_model* model,
                                             double clip_value) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    checked(model, "model");
    accelerator->session->clip_grad_value(*model->model, clip_value);
  });
}

}  // extern "C"
