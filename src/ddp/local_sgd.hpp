// Accelerate's LocalSGD (local_sgd.py): a prepared model trains on each rank without gradient
// synchronisation, and every `steps` optimizer steps the ranks average its parameters. Beyond
// Accelerate: the average happens in one all-reduce per dtype (not one per parameter), the closing
// average is skipped when the last step has just averaged (so a run of n steps averages
// ceil(n / steps) times), and DiLoCo's outer step is an option: the averaged change since the
// last average is treated as a gradient for an outer Nesterov SGD.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel::model {
class Model;
}
namespace accel::prepare {
class Session;
}

namespace accel::ddp {

struct OuterOptions {
  bool enabled = false;   // outer_optimizer: none (Accelerate's plain average) or nesterov
  double lr = 0.7;        // outer_lr, DiLoCo's value
  double momentum = 0.9;  // outer_momentum
};

class LocalSgd {
 public:
  // Opens the model's no_sync scope. Throws accel::Error: invalid_argument for steps < 1;
  // unsupported under ZeRO (the parameters are sharded; Accelerate refuses DeepSpeed and FSDP);
  // state when the model is not prepared in a job of several processes.
  LocalSgd(prepare::Session& session, std::shared_ptr<model::Model> model, int64_t steps);

  // outer_optimizer (none|nesterov), outer_lr, outer_momentum: before the first step; the outer
  // step's anchor is the parameters when outer_optimizer is set (before training).
  void set(const std::string& key, const std::string& value);
  // After each optimizer step: every `steps`-th call averages the parameters (a collective).
  void step(prepare::Session& session);
  // Averages once more unless nothing changed since the last average, and closes no_sync. A
  // second end does nothing.
  void end(prepare::Session& session);
  // Closes no_sync without averaging (the handle freed without end).
  void abandon(prepare::Session& session);

  int64_t steps_taken() const { return steps_taken_; }
  int64_t averages() const { return averages_; }
  bool ended() const { return ended_; }

 private:
  void average(prepare::Session& session);
  void outer_step(const std::vector<at::Tensor>& params, std::vector<at::Tensor>& averaged);

  std::shared_ptr<model::Model> model_;
  int64_t every_;
  bool enabled_;  // false with one process: nothing to average
  OuterOptions outer_;
  std::vector<at::Tensor> anchor_, momentum_;  // DiLoCo: the parameters at the last average
  int64_t steps_taken_ = 0, averages_ = 0, since_average_ = 0;
  bool ended_ = false;
};

}  // namespace accel::ddp
