// The structs behind the C handles. Each starts with its tag (see guard.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "capi/guard.hpp"
#include "config/config.hpp"
#include "runtime/accelerator.hpp"

struct accel_config {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kConfig);
  accel::config::Config config;
};

struct accel_tensor {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kTensor);
  at::Tensor tensor;
};

struct accel_accelerator {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kAccelerator);
  std::unique_ptr<accel::runtime::Accelerator> impl;
};

struct accel_bytes_list {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kBytesList);
  std::vector<std::string> items;
};

namespace accel::capi {
template <>
inline Tag tag_of<accel_config>() {
  return Tag::kConfig;
}
template <>
inline Tag tag_of<accel_tensor>() {
  return Tag::kTensor;
}
template <>
inline Tag tag_of<accel_accelerator>() {
  return Tag::kAccelerator;
}
template <>
inline Tag tag_of<accel_bytes_list>() {
  return Tag::kBytesList;
}

// A new tensor handle owning `t`.
accel_tensor* new_tensor(at::Tensor t);
}  // namespace accel::capi
