// accel.hpp's deprecated spellings (docs/stability.md: one minor version, working and warning).
// Compiled by abi.cpp_deprecated_spellings_warn, which expects it to build and each use below to
// warn with the new spelling; never linked.
#include <accel/accel.hpp>

void uses_every_deprecated_spelling(accel::Model& model, accel::Tensor& x, accel::Config& config) {
  model.call("forward", {&x});  // call(method, {x, y})
  model.call("forward", std::vector<const accel::Tensor*>{&x});
  accel::Dataset::from_tensors(std::vector<const accel::Tensor*>{&x});  // from_tensors({x, y})
  auto scope = model.forward();                                         // forward_scope()
  (void)config.get("mixed_precision");                                  // value(key)
}
