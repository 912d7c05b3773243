// Big-model inference: accel_infer_device_map (Accelerate's infer_auto_device_map over a model's
// module tree) and accel_dispatch_model (dispatch_model with disk offload).
#include "bigmodel/device_map.hpp"
#include "bigmodel/disk_offload.hpp"
#include "bigmodel/map_request.hpp"
#include "bigmodel/model_tree.hpp"
#include "capi/handles.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

namespace {

// The map Accelerate would compute for `model` under `options`, refused when it does not fit.
accel::bigmodel::DeviceMap infer_map(const accel_model& model, const std::string& options) {
  const auto request = accel::bigmodel::parse_map_request(options);
  const auto tree = accel::bigmodel::module_tree(model.model->module());
  auto map = accel::bigmodel::infer_auto_device_map(tree, request.options);
  accel::bigmodel::check_fits(map, accel::bigmodel::compute_module_sizes(tree), request);
  return map;
}

// A device map given as lines, or computed from options (they name max_memory).
accel::bigmodel::DeviceMap map_from(const accel_model& model, const std::string& text) {
  if (text.find("max_memory=") != std::string::npos) return infer_map(model, text);
  return accel::bigmodel::parse_map_lines(text);
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_infer_device_map(const accel_model* model, const char* options,
                                              accel_bytes_list** out) {
  return guarded([&] {
    checked(model, "model");
    require(options, "options");
    require(out, "out");
    auto list = std::make_unique<accel_bytes_list>();
    {
      FamilyLock lock(model->family);
      list->items = accel::bigmodel::map_lines(infer_map(*model, options));
    }
    *out = list.release();
  });
}

ACCEL_API accel_status accel_dispatch_model(accel_model* model, const char* checkpoint,
                                            const char* device_map_or_options) {
  return guarded([&] {
    checked(model, "model");
    require(checkpoint, "checkpoint");
    require(device_map_or_options, "device_map_or_options");
    FamilyLock lock(model->family);
    if (model->dispatch)
      fail(Errc::state, "accel_dispatch_model: the model was dispatched already");
    if (model->prepared)
      fail(Errc::state,
           "accel_dispatch_model: the model is prepared (training); dispatch a model of its own "
           "for inference");
    if (!model->model->host_tensors().empty())
      fail(Errc::unsupported,
           "accel_dispatch_model: the model's tensors are the host's, and so is its forward; "
           "dispatch takes catalogue and TorchScript models");
    const auto map = map_from(*model, device_map_or_options);
    model->dispatch =
        std::make_shared<accel::bigmodel::DiskOffload>(*model->model, map, checkpoint);
  });
}

}  // extern "C"
