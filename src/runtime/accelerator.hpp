// The runtime of one process: its place, device, thread settings, seeds and (when distributed) its
// communicator. The core accel::Accelerator (src/accelerator/) owns one, through its session.
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"
#include "config/sharding.hpp"
#include "logging/logger.hpp"
#include "runtime/communicator.hpp"
#include "runtime/gradient_state.hpp"
#include "runtime/process_place.hpp"

namespace accel::runtime {

enum class DistributedType { kNo = 0, kMultiCpu = 1, kMultiGpu = 2 };
enum class MixedPrecision { kNo = 0, kFp16 = 1, kBf16 = 2 };

class Accelerator {
 public:
  // Resolves the configuration against `env` (adding the file ACCEL_CONFIG_FILE names when `cfg`
  // has none), applies thread settings and joins the job. Only one may exist per process
  // (accel::Error(state) otherwise).
  Accelerator(const config::Config& cfg, const config::EnvMap& env);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  const ProcessPlace& place() const { return place_; }
  const config::Resolved& settings() const { return settings_; }
  const std::string& device() const { return device_; }
  DistributedType distributed_type() const { return distributed_type_; }
  MixedPrecision mixed_precision() const { return mixed_precision_; }
  // The ZeRO stage Accelerate's FSDP/DeepSpeed configuration chose (0 when none).
  const config::ShardingPlan& sharding() const { return sharding_; }
  // gradient_accumulation_steps, or DeepSpeed's section's where that sets it (ShardingPlan).
  int64_t gradient_accumulation_steps() const {
    return sharding_.accumulation_steps > 0 ? sharding_.accumulation_steps
                                            : settings_.integer("gradient_accumulation_steps");
  }
  int num_threads() const { return num_threads_; }
  bool is_main_process() const { return place_.rank == 0; }
  bool is_local_main_process() const { return place_.local_rank == 0; }

  // Null in a world of one.
  Communicator* communicator() { return comm_.get(); }
  // Where this accelerator's messages go, the library's own and the program's (accel.h,
  // "Logging"); its level starts at log_level.
  logging::Logger& logger() { return logger_; }
  // Shared with this process's data loaders (they may outlive the accelerator).
  const std::shared_ptr<GradientState>& gradient_state() const { return gradient_state_; }

  void wait_for_everyone();
  void set_seed(uint64_t seed, bool device_specific);

 private:
  // The constructor's steps: the device, distributed type and mixed precision; joining the job
  // (threads, allocator, communicator, CUDA device), which says where the local rank came from;
  // --debug's line.
  void choose_device_and_types(int gpus);
  std::string join_job(const config::EnvMap& env, int gpus);
  void say_debug_line(const std::string& local_from, bool use_cpu);
  void set_threads(int n);
  ProcessPlace place_;
  config::Resolved settings_;
  std::string device_;
  std::string cuda_note_;  // why the run is on the CPU when it could have used CUDA
  DistributedType distributed_type_ = DistributedType::kNo;
  MixedPrecision mixed_precision_ = MixedPrecision::kNo;
  config::ShardingPlan sharding_;
  int num_threads_ = 1;
  logging::Logger logger_;  // before comm_: the store's thread logs until comm_ is gone
  std::unique_ptr<Communicator> comm_;
  std::shared_ptr<GradientState> gradient_state_ = std::make_shared<GradientState>();
};

}  // namespace accel::runtime
