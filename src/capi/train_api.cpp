// accel_model_*, accel_optimizer_*, accel_scheduler_*, accel_prepare, accel_accumulate,
// accel_backward and clipping.
#include "bigmodel/disk_offload.hpp"
#include "capi/handles.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

using accel::capi::live_session;

namespace {

template <class Handle>
auto& accelerator_session(Handle* h) {
  return accel::capi::core_of(h).session();
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_model_new(accel_model** out) {
  return guarded([&] {
    require(out, "out");
    auto h = std::make_unique<accel_model>();
    h->model = std::make_shared<accel::model::Model>();
    h->family = std::make_shared<accel::capi::Family>();
    *out = h.release();
  });
}

ACCEL_API accel_status accel_model_new_empty(bool include_buffers, accel_model** out) {
  return guarded([&] {
    require(out, "out");
    auto h = std::make_unique<accel_model>();
    h->model = std::make_shared<accel::model::Model>(accel::model::EmptyInit{include_buffers});
    h->family = std::make_shared<accel::capi::Family>();
    *out = h.release();
  });
}

ACCEL_API accel_status accel_model_load_torchscript(const char* path, accel_model** out) {
  return guarded([&] {
    require(path, "path");
    require(out, "out");
    auto h = std::make_unique<accel_model>();
    h->model = accel::model::Model::load(path);
    h->family = std::make_shared<accel::capi::Family>();
    *out = h.release();
  });
}

ACCEL_API accel_status accel_model_add_layer(accel_model* model, const char* name, const char* kind,
                                             const char* spec) {
  return guarded([&] {
    checked(model, "model");
    require(name, "name");
    require(kind, "kind");
    FamilyLock lock(model->family);
    if (model->prepared) fail(Errc::state, "layers cannot be added to a prepared model");
    model->model->add_layer(name, kind, spec ? spec : "");
  });
}

ACCEL_API accel_status accel_model_define(accel_model* model, const char* source) {
  return guarded([&] {
    checked(model, "model");
    require(source, "source");
    FamilyLock lock(model->family);
    model->model->define(source);
  });
}

ACCEL_API accel_status accel_model_call(accel_model* model, const char* method,
                                        const accel_tensor* const* inputs, size_t input_count,
                                        accel_tensor_list** out) {
  return guarded([&] {
    checked(model, "model");
    require(method, "method");
    require(out, "out");
    if (input_count > 0) require(inputs, "inputs");
    std::vector<at::Tensor> in;
    for (size_t i = 0; i < input_count; ++i)
      in.push_back(checked(inputs[i], ("inputs[" + std::to_string(i) + "]").c_str())->tensor);
    auto list = std::make_unique<accel_tensor_list>();
    FamilyLock lock(model->family);
    auto session = live_session(model);
    if (model->dispatch)
      model->dispatch->prepare_call(*model->model);  // its released tensors come with the hooks
    else if (!session)
      model->model->require_whole("accel_model_call");
    list->items =
        session ? session->call(*model->model, method, in) : model->model->call(method, in);
    *out = list.release();
  });
}

ACCEL_API accel_status accel_model_train(accel_model* model, bool training) {
  return guarded([&] {
    checked(model, "model");
    FamilyLock lock(model->family);
    model->model->train(training);
  });
}

ACCEL_API accel_status accel_model_parameter_element_count(const accel_model* model, int64_t* out) {
  return accel::capi::locked_query(model, "model", out,
                                   [](const auto& h) { return h.model->num_parameters(); });
}

ACCEL_API accel_status accel_model_tensor_count(const accel_model* model, size_t* out) {
  return accel::capi::locked_query(model, "model", out,
                                   [](const auto& h) { return h.model->named_tensors().size(); });
}

ACCEL_API accel_status accel_model_tensor_name(const accel_model* model, size_t index, char* buf,
                                               size_t capacity, size_t* out_size) {
  return guarded([&] {
    checked(model, "model");
    std::string name;
    {
      FamilyLock lock(model->family);
      const auto all = model->model->named_tensors();
      if (index >= all.size())
        fail(Errc::invalid_argument, "index " + std::to_string(index) + " is out of range (" +
                                         std::to_string(all.size()) + " tensors)");
      name = all[index].first;
    }
    accel::capi::write_text(name, buf, capacity, out_size);
  });
}

ACCEL_API accel_status accel_model_tensor(const accel_model* model, const char* name,
                                          accel_tensor** out) {
  return guarded([&] {
    checked(model, "model");
    require(name, "name");
    require(out, "out");
    FamilyLock lock(model->family);
    if (model->dispatch) model->dispatch->refuse_offloaded("accel_model_tensor", name);
    model->model->require_filled("accel_model_tensor", name);  // first: the same on every rank
    model->model->require_whole("accel_model_tensor", name);
    for (const auto& [n, t] : model->model->named_tensors())
      if (n == name) {
        *out = accel::capi::new_tensor(t.detach().clone());
        return;
      }
    fail(Errc::invalid_argument,
         "the model has no parameter or buffer '" + std::string(name) + "'");
  });
}

ACCEL_API accel_status accel_model_save_torchscript(const accel_model* model, const char* path) {
  return guarded([&] {
    checked(model, "model");
    require(path, "path");
    FamilyLock lock(model->family);
    if (model->dispatch) model->dispatch->refuse_offloaded("accel_model_save_torchscript", "");
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
    if (model->dispatch)
      fail(Errc::state,
           "accel_optimizer_new: the model was dispatched with accel_dispatch_model, which is for "
           "inference only");
    auto h = std::make_unique<accel_optimizer>();
    h->optimizer = std::make_shared<accel::optim::Optimizer>(kind);
    // The names parameter groups are made from, in the order the optimizer is bound in
    // (trainable_parameters: named_parameters that require grad).
    h->optimizer->set_parameter_names([m = model->model] {
      std::vector<std::pair<std::string, bool>> names;
      for (const auto& [name, p] : m->named_parameters())
        names.emplace_back(name, p.requires_grad());
      return names;
    });
    h->model = model->model;
    h->family = model->family;  // the model's family: its step writes the model's parameters
    *out = h.release();
  });
}

ACCEL_API accel_status accel_optimizer_from_torch(accel_model* model, void* torch_optimizer,
                                                  accel_optimizer** out) {
  return guarded([&] {
    checked(model, "model");
    require(torch_optimizer, "torch_optimizer");
    require(out, "out");
    if (model->dispatch)
      fail(Errc::state,
           "accel_optimizer_from_torch: the model was dispatched with accel_dispatch_model, which "
           "is for inference only");
    const auto& program = *static_cast<std::shared_ptr<torch::optim::Optimizer>*>(torch_optimizer);
    auto h = std::make_unique<accel_optimizer>();
    h->optimizer = std::make_shared<accel::optim::Optimizer>(program);
    h->model = model->model;
    h->family = model->family;
    *out = h.release();
  });
}

ACCEL_API accel_status accel_optimizer_set(accel_optimizer* optimizer, const char* key,
                                           const char* value) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    require(key, "key");
    require(value, "value");
    FamilyLock lock(optimizer->family);
    optimizer->optimizer->set(key, value);
  });
}

ACCEL_API accel_status accel_optimizer_step(accel_optimizer* optimizer) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    FamilyLock lock(optimizer->family);
    if (auto session = live_session(optimizer)) {
      session->optimizer_step(*optimizer->optimizer);
    } else {
      accel::prepare::bind_unprepared(*optimizer->optimizer, *optimizer->model);
      optimizer->optimizer->step();
    }
  });
}

ACCEL_API accel_status accel_optimizer_zero_grad(accel_optimizer* optimizer) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    FamilyLock lock(optimizer->family);
    if (auto session = live_session(optimizer)) {
      session->optimizer_zero_grad(*optimizer->optimizer);
    } else {
      accel::prepare::bind_unprepared(*optimizer->optimizer, *optimizer->model);
      optimizer->optimizer->zero_grad();
    }
  });
}

ACCEL_API accel_status accel_optimizer_lr(const accel_optimizer* optimizer, double* out) {
  return accel::capi::locked_query(optimizer, "optimizer", out,
                                   [](const auto& h) { return h.optimizer->lr(); });
}

ACCEL_API accel_status accel_optimizer_set_lr(accel_optimizer* optimizer, double lr) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    FamilyLock lock(optimizer->family);
    optimizer->optimizer->set_lr(lr);
  });
}

ACCEL_API accel_status accel_optimizer_step_was_skipped(const accel_optimizer* optimizer,
                                                        bool* out) {
  return accel::capi::locked_query(optimizer, "optimizer", out, [](const auto& h) {
    auto session = live_session(&h);
    return session && session->step_was_skipped(*h.optimizer);
  });
}

ACCEL_API accel_status accel_optimizer_add_group(accel_optimizer* optimizer,
                                                 const char* const* names, size_t count,
                                                 size_t* out_group) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    if (count > 0) require(names, "names");
    require(out_group, "out_group");
    std::vector<std::string> list;
    for (size_t i = 0; i < count; ++i) {
      if (!names[i]) fail(Errc::invalid_argument, "names[" + std::to_string(i) + "] is NULL");
      list.emplace_back(names[i]);
    }
    FamilyLock lock(optimizer->family);
    if (optimizer->prepared)
      fail(Errc::state, "parameter groups are made before accel_prepare (this one is prepared)");
    *out_group = optimizer->optimizer->add_group(list);
  });
}

ACCEL_API accel_status accel_optimizer_group_count(const accel_optimizer* optimizer, size_t* out) {
  return accel::capi::locked_query(optimizer, "optimizer", out,
                                   [](const auto& h) { return h.optimizer->group_count(); });
}

ACCEL_API accel_status accel_optimizer_set_group(accel_optimizer* optimizer, size_t group,
                                                 const char* key, const char* value) {
  return guarded([&] {
    checked(optimizer, "optimizer");
    require(key, "key");
    require(value, "value");
    FamilyLock lock(optimizer->family);
    optimizer->optimizer->set_group(group, key, value);
  });
}

ACCEL_API accel_status accel_optimizer_group_lr(const accel_optimizer* optimizer, size_t group,
                                                double* out) {
  return accel::capi::locked_query(optimizer, "optimizer", out,
                                   [group](const auto& h) { return h.optimizer->group_lr(group); });
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
    h->family = optimizer->family;
    FamilyLock lock(h->family);  // the scheduler sets the optimizer's rate at once
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
    FamilyLock lock(scheduler->family);
    scheduler->scheduler->set(key, value);
  });
}

ACCEL_API accel_status accel_scheduler_step(accel_scheduler* scheduler) {
  return guarded([&] {
    checked(scheduler, "scheduler");
    FamilyLock lock(scheduler->family);
    if (auto session = live_session(scheduler))
      session->scheduler_step(*scheduler->scheduler);
    else
      scheduler->scheduler->step();
  });
}

ACCEL_API accel_status accel_scheduler_lr(const accel_scheduler* scheduler, double* out) {
  return accel::capi::locked_query(scheduler, "scheduler", out,
                                   [](const auto& h) { return h.scheduler->lr(); });
}

ACCEL_API void accel_scheduler_free(accel_scheduler* scheduler) {
  accel::capi::free_handle(scheduler, "scheduler");
}

ACCEL_API accel_status accel_prepare(accel_accelerator* accelerator, void* const* objects,
                                     size_t count) {
  return guarded([&] {
    auto* acc = checked(accelerator, "accelerator");
    if (count > 0) require(objects, "objects");
    // Translate the handles (every handle starts with its tag); nothing is prepared yet.
    std::vector<accel_model*> models;
    std::vector<accel_optimizer*> optimizers;
    std::vector<accel_scheduler*> schedulers;
    accel::prepare::Session::Objects sorted;
    for (size_t i = 0; i < count; ++i) {
      const std::string param = "objects[" + std::to_string(i) + "]";
      if (!objects[i]) fail(Errc::invalid_argument, param + " is NULL");
      uint32_t tag = 0;
      std::memcpy(&tag, objects[i], sizeof tag);
      switch (static_cast<accel::capi::Tag>(tag)) {
        case accel::capi::Tag::kModel:
          models.push_back(static_cast<accel_model*>(objects[i]));
          if (models.back()->dispatch)
            fail(Errc::state, param +
                                  ": the model was dispatched with accel_dispatch_model, "
                                  "which is for inference only");
          sorted.models.push_back(models.back()->model);
          break;
        case accel::capi::Tag::kOptimizer:
          optimizers.push_back(static_cast<accel_optimizer*>(objects[i]));
          sorted.optimizers.emplace_back(optimizers.back()->optimizer, optimizers.back()->model);
          break;
        case accel::capi::Tag::kScheduler:
          schedulers.push_back(static_cast<accel_scheduler*>(objects[i]));
          sorted.schedulers.push_back(schedulers.back()->scheduler);
          break;
        case accel::capi::Tag::kDataloader:
          sorted.dataloaders.push_back(static_cast<accel_dataloader*>(objects[i])->loader);
          break;
        default:
          fail(Errc::wrong_handle, param +
                                       " is not an accel_model, accel_optimizer, accel_scheduler "
                                       "or accel_dataloader (it is " +
                                       accel::capi::tag_name(tag) + ")");
      }
    }
    FamilyLock lock(acc->family);
    // Every object's family too, so that no call of theirs runs while they change hands. No other
    // thread takes two families without the accelerator's first, so this cannot deadlock.
    std::vector<std::unique_ptr<FamilyLock>> held;
    for (auto* m : models) held.push_back(std::make_unique<FamilyLock>(m->family));
    for (auto* o : optimizers) held.push_back(std::make_unique<FamilyLock>(o->family));
    for (auto* s : schedulers) held.push_back(std::make_unique<FamilyLock>(s->family));
    auto& session = acc->core->session();
    // The handles follow what the session reports, also when it failed halfway (a peer died).
    auto adopt = [&](auto* h, const auto* object) {
      if (!session.is_prepared(object)) return;
      h->session = acc->core->shared_session();
      h->prepared = true;
      lock.join(h->family);
    };
    auto adopt_all = [&] {
      for (auto* m : models) adopt(m, m->model.get());
      for (auto* o : optimizers) adopt(o, o->optimizer.get());
      for (auto* s : schedulers) adopt(s, s->scheduler.get());
    };
    try {
      session.prepare(sorted);
    } catch (...) {
      adopt_all();
      throw;
    }
    adopt_all();
  });
}

ACCEL_API accel_status accel_accumulate(accel_accelerator* accelerator) {
  return guarded([&] {
    auto& session = accelerator_session(accelerator);
    FamilyLock lock(accelerator->family);
    session.accumulate();
  });
}

ACCEL_API accel_status accel_sync_gradients(const accel_accelerator* accelerator, bool* out) {
  return accel::capi::locked_query(accelerator, "accelerator", out, [](const auto& h) {
    return h.core->session().sync_gradients();
  });
}

ACCEL_API accel_status accel_backward(accel_accelerator* accelerator, const accel_tensor* loss) {
  return guarded([&] {
    auto& session = accelerator_session(accelerator);
    checked(loss, "loss");
    FamilyLock lock(accelerator->family);
    session.backward(loss->tensor);
  });
}

ACCEL_API accel_status accel_clip_grad_norm(accel_accelerator* accelerator, accel_model* model,
                                            double max_norm, double norm_type, double* out_norm) {
  return guarded([&] {
    auto& session = accelerator_session(accelerator);
    checked(model, "model");
    FamilyLock lock(accelerator->family);  // the accelerator's family first, always
    FamilyLock model_lock(model->family);
    const double norm = session.clip_grad_norm(*model->model, max_norm, norm_type);
    if (out_norm) *out_norm = norm;
  });
}

ACCEL_API accel_status accel_clip_grad_value(accel_accelerator* accelerator, accel_model* model,
                                             double clip_value) {
  return guarded([&] {
    auto& session = accelerator_session(accelerator);
    checked(model, "model");
    FamilyLock lock(accelerator->family);
    FamilyLock model_lock(model->family);
    session.clip_grad_value(*model->model, clip_value);
  });
}

}  // extern "C"
