// The structs behind the C handles. Each starts with its tag (see guard.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "accelerator/accelerator.hpp"
#include "capi/family.hpp"
#include "capi/guard.hpp"
#include "checkpoint/pretrained.hpp"
#include "config/config.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/stream.hpp"
#include "ddp/local_sgd.hpp"
#include "profile/profiler.hpp"

// Thread rules (accel.h, "Threads"): a config serialises its writes with `mutex`; tensors, lists
// and datasets are never changed after they are made; models, optimizers, schedulers and the
// accelerator lock their training family; a dataloader locks itself (inside data::DataLoader).

struct accel_config {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kConfig);
  mutable std::shared_mutex mutex;
  accel::config::Config config;
};

struct accel_tensor {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kTensor);
  at::Tensor tensor;
};

struct accel_tensor_list {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kTensorList);
  std::vector<at::Tensor> items;
};

struct accel_accelerator {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kAccelerator);
  std::unique_ptr<accel::Accelerator> core;
  std::shared_ptr<accel::capi::Family> family = std::make_shared<accel::capi::Family>();
  // Expires when the handle is freed: objects that keep this handle (a Trainer) check it.
  std::shared_ptr<void> alive = std::make_shared<int>(0);
};

// `family` is set when the handle is made and never changes (the family itself may be joined to
// an accelerator's); `session` and `prepared` change under the family lock only.
namespace accel::bigmodel {
class DiskOffload;
}

struct accel_model {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kModel);
  std::shared_ptr<accel::model::Model> model;
  std::shared_ptr<accel::capi::Family> family;
  std::weak_ptr<accel::prepare::Session> session;
  bool prepared = false;
  // Set by accel_dispatch_model (inference only); after `model`, so that it goes first.
  std::shared_ptr<accel::bigmodel::DiskOffload> dispatch;
};

struct accel_optimizer {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kOptimizer);
  std::shared_ptr<accel::optim::Optimizer> optimizer;
  std::shared_ptr<accel::model::Model> model;
  std::shared_ptr<accel::capi::Family> family;
  std::weak_ptr<accel::prepare::Session> session;
  bool prepared = false;
};

struct accel_scheduler {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kScheduler);
  std::shared_ptr<accel::optim::LrScheduler> scheduler;
  std::shared_ptr<accel::capi::Family> family;
  std::weak_ptr<accel::prepare::Session> session;
  bool prepared = false;
};

struct accel_bytes_list {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kBytesList);
  std::vector<std::string> items;
};

struct accel_dataset {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kDataset);
  std::shared_ptr<accel::data::Dataset> dataset;
};

struct accel_dataloader {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kDataloader);
  std::shared_ptr<accel::data::DataLoader> loader;  // a prepared one is shared with the session
};

// Lives on the stack of a checkpoint save: the bytes the program's save callback writes.
struct accel_state_writer {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kStateWriter);
  std::string bytes;
};

struct accel_values {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kValues);
  accel::tracking::Values values;
};

// Lives on the stack of a stream callback's call: the sample it writes.
struct accel_sample {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kSample);
  accel::data::SampleWriter* writer = nullptr;
};

// The model's family (joined to the accelerator's once prepared) guards `core`; the session is
// held weakly as a prepared object holds it.
struct accel_local_sgd {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kLocalSgd);
  std::unique_ptr<accel::ddp::LocalSgd> core;
  std::shared_ptr<accel::capi::Family> family;
  std::weak_ptr<accel::prepare::Session> session;
};

// Used from the one thread that starts it (LibTorch's profiler is per thread); `session` for the
// end of the block (trace files, the barrier).
struct accel_profiler {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kProfiler);
  accel::profile::Profiler core;
  std::weak_ptr<accel::prepare::Session> session;
};

struct accel_load_report {
  uint32_t tag = static_cast<uint32_t>(accel::capi::Tag::kLoadReport);
  accel::checkpoint::PretrainedLoad load;
};

namespace accel::capi {
template <>
inline Tag tag_of<accel_load_report>() {
  return Tag::kLoadReport;
}
template <>
inline Tag tag_of<accel_local_sgd>() {
  return Tag::kLocalSgd;
}
template <>
inline Tag tag_of<accel_profiler>() {
  return Tag::kProfiler;
}
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
template <>
inline Tag tag_of<accel_dataset>() {
  return Tag::kDataset;
}
template <>
inline Tag tag_of<accel_dataloader>() {
  return Tag::kDataloader;
}
template <>
inline Tag tag_of<accel_model>() {
  return Tag::kModel;
}
template <>
inline Tag tag_of<accel_optimizer>() {
  return Tag::kOptimizer;
}
template <>
inline Tag tag_of<accel_scheduler>() {
  return Tag::kScheduler;
}
template <>
inline Tag tag_of<accel_tensor_list>() {
  return Tag::kTensorList;
}
template <>
inline Tag tag_of<accel_state_writer>() {
  return Tag::kStateWriter;
}
template <>
inline Tag tag_of<accel_sample>() {
  return Tag::kSample;
}
template <>
inline Tag tag_of<accel_values>() {
  return Tag::kValues;
}

// The ABI's dtypes and LibTorch's. to_scalar_type is false for a value that is not an accel_dtype;
// from_scalar_type throws accel::Error(dtype) for a LibTorch type with no accel_dtype.
bool to_scalar_type(accel_dtype d, at::ScalarType* out);
accel_dtype from_scalar_type(at::ScalarType t);

// A new tensor handle owning `t`.
accel_tensor* new_tensor(at::Tensor t);

// The core accelerator behind a handle, checked as `checked` does.
inline accel::Accelerator& core_of(accel_accelerator* a) {
  return *checked(a, "accelerator")->core;
}
inline const accel::Accelerator& core_of(const accel_accelerator* a) {
  return *checked(a, "accelerator")->core;
}

// A getter under the handle's family lock (what a training step may be changing).
template <class Handle, class Out, class Read>
accel_status locked_query(const Handle* handle, const char* param, Out* out, Read&& read) noexcept {
  return query(handle, param, out, [&](const Handle& h) {
    FamilyLock lock(h.family);
    return read(h);
  });
}

// The session an object was prepared with (null when never prepared); an error once its
// accelerator is gone. Call with the object's family lock held.
template <class Handle>
std::shared_ptr<prepare::Session> live_session(const Handle* h) {
  if (!h->prepared) return nullptr;
  auto s = h->session.lock();
  if (!s) fail(Errc::state, "the accelerator this object was prepared with has been freed");
  return s;
}
}  // namespace accel::capi
