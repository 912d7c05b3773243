// Big-model inference: accel_infer_device_map (Accelerate's infer_auto_device_map over a model's
// module tree).
#include "bigmodel/device_map.hpp"
#include "bigmodel/map_request.hpp"
#include "bigmodel/model_tree.hpp"
#include "capi/handles.hpp"

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

}  // extern "C"
