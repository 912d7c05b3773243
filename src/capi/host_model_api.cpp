// Models whose tensors the host owns: accel_model_add_parameter, accel_model_add_buffer,
// accel_model_forward_begin/_end, accel_tensor_set_requires_grad.
#include "capi/handles.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::live_session;
using accel::capi::require;

namespace {

accel_status add_host_tensor(accel_model* model, const char* name, const accel_tensor* tensor,
                             bool is_buffer) {
  return guarded([&] {
    checked(model, "model");
    require(name, "name");
    checked(tensor, "tensor");
    FamilyLock lock(model->family);
    if (model->prepared)
      fail(Errc::state, std::string(is_buffer ? "buffers" : "parameters") +
                            " cannot be added to a prepared model");
    model->model->add_host_tensor(name, tensor->tensor, is_buffer);
  });
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_tensor_set_requires_grad(accel_tensor* tensor, bool requires_grad) {
  return guarded([&] {
    checked(tensor, "tensor");
    const at::Tensor& t = tensor->tensor;
    if (!t.is_leaf())
      fail(Errc::invalid_argument,
           "requires_grad can only be changed on an autograd leaf (this tensor was computed "
           "from others)");
    if (requires_grad && !at::isFloatingType(t.scalar_type()) &&
        !at::isComplexType(t.scalar_type()))
      fail(Errc::dtype, std::string("only floating-point tensors can require grad; this one is ") +
                            c10::toString(t.scalar_type()));
    at::Tensor(t).set_requires_grad(requires_grad);
  });
}

ACCEL_API accel_status accel_model_add_parameter(accel_model* model, const char* name,
                                                 const accel_tensor* tensor) {
  return add_host_tensor(model, name, tensor, /*is_buffer=*/false);
}

ACCEL_API accel_status accel_model_add_buffer(accel_model* model, const char* name,
                                              const accel_tensor* tensor) {
  return add_host_tensor(model, name, tensor, /*is_buffer=*/true);
}

ACCEL_API accel_status accel_model_forward_begin(accel_model* model) {
  return guarded([&] {
    checked(model, "model");
    FamilyLock lock(model->family);
    model->model->require_filled("accel_model_forward_begin");
    if (auto session = live_session(model))
      session->forward_begin(*model->model);
    else
      accel::prepare::begin_unprepared_forward(*model->model);
  });
}

ACCEL_API accel_status accel_model_forward_end(accel_model* model) {
  return guarded([&] {
    checked(model, "model");
    // This thread's own record: no lock, no session (its accelerator may be gone by now).
    accel::prepare::end_host_forward(*model->model);
  });
}

}  // extern "C"
