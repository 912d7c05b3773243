// Accelerate's dispatch_model with disk offload, on the CPU: a model's tensors mapped to `cpu` are
// loaded once from the checkpoint; those mapped to `disk` keep no storage, and just before each
// forward of their module (a unit) are read from the checkpoint's safetensors file (pread) into
// one buffer reused by every unit in turn, then dropped after it: AlignDevicesHook's pre_forward /
// post_forward, through the ZeRO-3 instrumentation's unit_enter / unit_exit hooks.
//
// Inference only: every parameter stops requiring grad (an offloaded unit's weights are gone
// after its forward, so backward could not use them) and a unit whose output requires grad (an
// input that does) is refused.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "bigmodel/device_map.hpp"
#include "checkpoint/tensor_reader.hpp"
#include "model/model.hpp"
#include "zero/unit_observer.hpp"

namespace accel::bigmodel {

class DiskOffload : public zero::UnitObserver {
 public:
  // Checks everything before changing the model (accel::Error, the model unchanged): the
  // checkpoint's files (io), that the map places each of the model's tensors (invalid_argument),
  // that the checkpoint has each with the model's shape (invalid_argument, shape) and a dtype of
  // its kind (dtype), and that each disk unit's calls can be followed (unsupported, naming why).
  // Then loads the cpu tensors (a read failing midway: io, the model partly loaded) and releases
  // the disk ones.
  DiskOffload(model::Model& model, const DeviceMap& map, const std::string& checkpoint);
  ~DiskOffload() override;
  DiskOffload(const DiskOffload&) = delete;
  DiskOffload& operator=(const DiskOffload&) = delete;

  // Before each call of the model: methods defined since dispatch get the hooks too.
  void prepare_call(model::Model& model);

  void enter(size_t unit) override;
  at::Tensor exit(size_t unit, const at::Tensor& output) override;

  // accel::Error(state), naming it and `what`, when tensor `name` (any, when empty) is offloaded
  // to disk.
  void refuse_offloaded(const std::string& what, const std::string& name) const;
  // The reused buffer's size: the largest unit's bytes.
  size_t buffer_bytes() const { return buffer_bytes_; }

 private:
  struct Offloaded {
    std::string name;
    at::Tensor tensor;
    size_t offset = 0, bytes = 0;  // in the buffer
  };
  struct Unit {
    std::string name;
    const void* object = nullptr;
    std::vector<Offloaded> tensors;
    int depth = 0;
  };
  void release(Unit& u) noexcept;
  void plan(model::Model& model, const DeviceMap& map, std::vector<std::string>& cpu);
  void load_cpu(model::Model& model, const std::vector<std::string>& cpu);
  void release_disk(model::Model& model);
  void hook(model::Model& model);

  checkpoint::TensorReader reader_;
  std::vector<Unit> units_;
  at::Tensor buffer_;
  size_t buffer_bytes_ = 0;
  std::optional<size_t> active_;
  uint64_t revision_ = 0;  // the model's, when its methods were last instrumented
};

}  // namespace accel::bigmodel
