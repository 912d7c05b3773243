// Tensors a host program owns and lends to a model (accel_model_add_parameter/_add_buffer): the
// checks that make them safe to train in place, and the record that notices when the host changes
// one behind the model's back. The model keeps a reference to each: the host may drop its own.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace accel::model {

class HostTensors {
 public:
  HostTensors();
  ~HostTensors();
  HostTensors(const HostTensors&) = delete;
  HostTensors& operator=(const HostTensors&) = delete;

  // Checks `t` as parameter (or buffer) `name` of a model whose tensors are `existing`, and
  // records it. accel::Error(invalid_argument) when it is undefined, not strided, a parameter that
  // is not a floating-point autograd leaf requiring grad, a buffer that requires grad, on another
  // device than `existing` (empty, meta, tensors are on none: they go with any), or sharing memory
  // with a tensor of this model or of any other model's host tensors (the same storage, or storages
  // over overlapping memory, as from_blob makes).
  void admit(const std::string& name, const at::Tensor& t, bool is_parameter,
             const std::vector<std::pair<std::string, at::Tensor>>& existing);
  // Takes back the last admit (its registration failed further on).
  void forget_last();

  bool empty() const { return entries_.empty(); }
  // Records each tensor's storage and shape as prepared (after device placement moved them).
  void pin();
  // accel::Error(state) naming the tensor when the host resized it or replaced its storage since
  // pin(). Nothing before pin().
  void check() const;

 private:
  struct Entry {
    std::string name;
    at::Tensor tensor;
    // The storage's memory, recorded under the registry's lock at admit and pin: other models
    // compare against these, never read a tensor another thread may be moving.
    uintptr_t begin = 0, end = 0;
    const void* data = nullptr;  // pinned
    std::vector<int64_t> sizes;  // pinned
  };
  std::vector<Entry> entries_;
  bool pinned_ = false;
};

// "conv1.weight" as {"conv1", "weight"}: dot-separated segments of letters, digits and '_'
// ("layers.0.bias" as torch.nn.Sequential names them). accel::Error(invalid_argument) otherwise.
std::vector<std::string> split_tensor_name(const std::string& name);

}  // namespace accel::model
