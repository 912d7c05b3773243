// accel_init, the accelerator's queries and helpers, and the collectives.
#include <ATen/ATen.h>

#include "capi/handles.hpp"
#include "common/interrupt.hpp"
#include "logging/levels.hpp"
#include "ops/collectives.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

namespace {

using accel::capi::core_of;

// The runtime, for the queries: what they read is fixed when the accelerator is made.
const accel::runtime::Accelerator& runtime_of(const accel_accelerator* a) {
  return core_of(a).runtime();
}

accel::runtime::Accelerator& runtime_of(accel_accelerator* a) {
  return core_of(a).runtime();
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_init(const accel_config* config, accel_accelerator** out) {
  return guarded([&] {
    require(out, "out");
    accel::config::Config cfg;
    if (config) {
      checked(config, "config");
      std::shared_lock<std::shared_mutex> lock(config->mutex);
      cfg = config->config;
    }
    auto handle = std::make_unique<accel_accelerator>();
    handle->core = std::make_unique<accel::Accelerator>(cfg, accel::config::process_environment());
    *out = handle.release();
  });
}

ACCEL_API void accel_accelerator_free(accel_accelerator* accelerator) {
  accel::capi::free_handle(accelerator, "accelerator");
}

ACCEL_API accel_status accel_process_index(const accel_accelerator* accelerator, int32_t* out) {
  return accel::capi::query(accelerator, "accelerator", out,
                            [](const auto& h) { return h.core->runtime().place().rank; });
}

ACCEL_API accel_status accel_local_process_index(const accel_accelerator* accelerator,
                                                 int32_t* out) {
  return accel::capi::query(accelerator, "accelerator", out,
                            [](const auto& h) { return h.core->runtime().place().local_rank; });
}

ACCEL_API accel_status accel_num_processes(const accel_accelerator* accelerator, int32_t* out) {
  return accel::capi::query(accelerator, "accelerator", out,
                            [](const auto& h) { return h.core->runtime().place().world_size; });
}

ACCEL_API accel_status accel_is_main_process(const accel_accelerator* accelerator, bool* out) {
  return accel::capi::query(accelerator, "accelerator", out,
                            [](const auto& h) { return h.core->runtime().is_main_process(); });
}

ACCEL_API accel_status accel_is_local_main_process(const accel_accelerator* accelerator,
                                                   bool* out) {
  return accel::capi::query(accelerator, "accelerator", out, [](const auto& h) {
    return h.core->runtime().is_local_main_process();
  });
}

ACCEL_API accel_status accel_device(const accel_accelerator* accelerator, char* buf,
                                    size_t capacity, size_t* out_size) {
  return guarded(
      [&] { accel::capi::write_text(runtime_of(accelerator).device(), buf, capacity, out_size); });
}

ACCEL_API accel_status accel_distributed_type(const accel_accelerator* accelerator,
                                              accel_distribution* out) {
  return guarded([&] {
    const auto& a = runtime_of(accelerator);
    require(out, "out");
    const std::string& family = a.sharding().family;
    *out = family == "DEEPSPEED" ? ACCEL_DISTRIBUTED_DEEPSPEED
           : family == "FSDP"    ? ACCEL_DISTRIBUTED_FSDP
                                 : static_cast<accel_distribution>(a.distributed_type());
  });
}

ACCEL_API accel_status accel_mixed_precision(const accel_accelerator* accelerator,
                                             accel_precision* out) {
  return accel::capi::query(accelerator, "accelerator", out, [](const auto& h) {
    return static_cast<accel_precision>(h.core->runtime().mixed_precision());
  });
}

ACCEL_API accel_status accel_effective_config(const accel_accelerator* accelerator, char* buf,
                                              size_t capacity, size_t* out_size) {
  return guarded([&] {
    accel::capi::write_text(runtime_of(accelerator).settings().dump_yaml(), buf, capacity,
                            out_size);
  });
}

ACCEL_API accel_status accel_wait_for_everyone(accel_accelerator* accelerator) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    FamilyLock lock(accelerator->family);
    a.wait_for_everyone();
  });
}

// Takes no family lock: it is meant for another thread while this accelerator's call waits.
ACCEL_API accel_status accel_set_interrupted(accel_accelerator* accelerator, int interrupted) {
  return guarded([&] {
    runtime_of(accelerator);  // checks the handle
    accel::interrupt::set(interrupted != 0);
  });
}

ACCEL_API accel_status accel_set_trigger(accel_accelerator* accelerator) {
  return guarded([&] { core_of(accelerator).set_trigger(); });
}

ACCEL_API accel_status accel_check_trigger(accel_accelerator* accelerator, bool* out) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    require(out, "out");
    FamilyLock lock(accelerator->family);
    *out = core.check_trigger();
  });
}

ACCEL_API accel_status accel_join_uneven_inputs_begin(accel_accelerator* accelerator,
                                                      int32_t even_batches) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    if (even_batches < -1 || even_batches > 1)
      fail(Errc::invalid_argument,
           "even_batches is " + std::to_string(even_batches) + "; allowed: -1 (keep), 0, 1");
    FamilyLock lock(accelerator->family);
    core.session().join_begin(even_batches);
  });
}

ACCEL_API accel_status accel_join_uneven_inputs_end(accel_accelerator* accelerator) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    FamilyLock lock(accelerator->family);
    core.session().join_end();
  });
}

ACCEL_API accel_status accel_print(const accel_accelerator* accelerator, const char* message) {
  return guarded([&] {
    const auto& core = core_of(accelerator);
    require(message, "message");
    core.print(message);
  });
}

ACCEL_API accel_status accel_main_process_first_begin(accel_accelerator* accelerator) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    FamilyLock lock(accelerator->family);
    core.main_process_first_begin();
  });
}

ACCEL_API accel_status accel_main_process_first_end(accel_accelerator* accelerator) {
  return guarded([&] {
    auto& core = core_of(accelerator);
    FamilyLock lock(accelerator->family);
    core.main_process_first_end();
  });
}

ACCEL_API accel_status accel_set_seed(accel_accelerator* accelerator, uint64_t seed,
                                      bool device_specific) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    FamilyLock lock(accelerator->family);
    a.set_seed(seed, device_specific);
  });
}

ACCEL_API accel_status accel_gather(accel_accelerator* accelerator, const accel_tensor* tensor,
                                    accel_tensor** out) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    checked(tensor, "tensor");
    require(out, "out");
    FamilyLock lock(accelerator->family);
    *out = accel::capi::new_tensor(accel::ops::gather(a.communicator(), tensor->tensor));
  });
}

ACCEL_API accel_status accel_pad_across_processes(accel_accelerator* accelerator,
                                                  const accel_tensor* tensor, int64_t dim,
                                                  double pad_value, bool pad_first,
                                                  accel_tensor** out) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    checked(tensor, "tensor");
    require(out, "out");
    FamilyLock lock(accelerator->family);
    *out = accel::capi::new_tensor(accel::ops::pad_across_processes(
        a.communicator(), tensor->tensor, dim, pad_value, pad_first));
  });
}

ACCEL_API accel_status accel_reduce(accel_accelerator* accelerator, const accel_tensor* tensor,
                                    accel_reduction reduction, accel_tensor** out) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    checked(tensor, "tensor");
    require(out, "out");
    accel::ops::Reduction r;
    switch (reduction) {
      case ACCEL_REDUCE_SUM:
        r = accel::ops::Reduction::kSum;
        break;
      case ACCEL_REDUCE_MEAN:
        r = accel::ops::Reduction::kMean;
        break;
      case ACCEL_REDUCE_MAX:
        r = accel::ops::Reduction::kMax;
        break;
      case ACCEL_REDUCE_MIN:
        r = accel::ops::Reduction::kMin;
        break;
      default:
        fail(Errc::invalid_argument,
             "reduction " + std::to_string(reduction) + " is not an accel_reduction value");
    }
    FamilyLock lock(accelerator->family);
    *out = accel::capi::new_tensor(accel::ops::reduce(a.communicator(), tensor->tensor, r));
  });
}

ACCEL_API accel_status accel_broadcast(accel_accelerator* accelerator, const accel_tensor* tensor,
                                       int32_t from_process, accel_tensor** out) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    if (tensor) checked(tensor, "tensor");
    require(out, "out");
    if (a.place().rank == from_process) require(tensor, "tensor (on the source rank)");
    const at::Tensor source = tensor ? tensor->tensor : at::Tensor();
    FamilyLock lock(accelerator->family);
    *out = accel::capi::new_tensor(accel::ops::broadcast(a.communicator(), source, from_process));
  });
}

ACCEL_API accel_status accel_gather_object(accel_accelerator* accelerator, const void* data,
                                           size_t size, accel_bytes_list** out) {
  return guarded([&] {
    auto& a = runtime_of(accelerator);
    if (size > 0) require(data, "data");
    require(out, "out");
    const std::string bytes =
        size ? std::string(static_cast<const char*>(data), size) : std::string();
    auto list = std::make_unique<accel_bytes_list>();
    FamilyLock lock(accelerator->family);
    list->items = accel::ops::gather_object(a.communicator(), bytes);
    *out = list.release();
  });
}

ACCEL_API accel_status accel_bytes_list_count(const accel_bytes_list* list, size_t* out) {
  return accel::capi::query(list, "list", out, [](const auto& h) { return h.items.size(); });
}

ACCEL_API accel_status accel_bytes_list_get(const accel_bytes_list* list, size_t index,
                                            const void** out_data, size_t* out_size) {
  return guarded([&] {
    checked(list, "list");
    require(out_data, "out_data");
    require(out_size, "out_size");
    if (index >= list->items.size())
      fail(Errc::invalid_argument, "index " + std::to_string(index) + " is out of range (" +
                                       std::to_string(list->items.size()) + " entries)");
    *out_data = list->items[index].data();  // never NULL, also when empty (Rust slices need that)
    *out_size = list->items[index].size();
  });
}

ACCEL_API void accel_bytes_list_free(accel_bytes_list* list) {
  accel::capi::free_handle(list, "list");
}

}  // extern "C"
