// accel_save_model and accel_load_checkpoint_in_model.
#include "capi/handles.hpp"
#include "checkpoint/model_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "checkpoint/state.hpp"
#include "ops/collectives.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::guarded;
using accel::capi::require;

extern "C" {

ACCEL_API accel_status accel_save_model(accel_accelerator* accelerator, const accel_model* model,
                                        const char* dir, const char* max_shard_size) {
  return guarded([&] {
    auto& acc = *checked(accelerator, "accelerator")->impl;
    checked(model, "model");
    require(dir, "dir");
    const uint64_t shard = accel::checkpoint::parse_size(max_shard_size ? max_shard_size : "10GB");
    std::string error;
    if (acc.is_main_process()) {
      try {
        accel::checkpoint::save_model(*model->model, dir, shard);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    // The others wait for the main process and learn how it went, so every rank returns alike.
    if (auto* comm = acc.communicator()) {
      const auto all = accel::ops::gather_object(comm, error);
      error = all[0];
    }
    if (!error.empty()) fail(Errc::io, "save_model on the main process failed: " + error);
  });
}

ACCEL_API accel_status accel_load_checkpoint_in_model(accel_model* model, const char* path) {
  return guarded([&] {
    checked(model, "model");
    require(path, "path");
    accel::checkpoint::load_checkpoint_in_model(*model->model, path);
  });
}

ACCEL_API accel_status accel_save_state(accel_accelerator* accelerator, const char* dir) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    if (dir)
      accel::checkpoint::save_state(*accelerator->session, dir);
    else
      accel::checkpoint::save_state_automatic(*accelerator->session);
  });
}

ACCEL_API accel_status accel_load_state(accel_accelerator* accelerator, const char* dir) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    if (dir)
      accel::checkpoint::load_state(*accelerator->session, dir);
    else
      accel::checkpoint::load_state_automatic(*accelerator->session);
  });
}

ACCEL_API accel_status accel_register_for_checkpointing(accel_accelerator* accelerator,
                                                        accel_state_save_fn save,
                                                        accel_state_load_fn load, void* user_data) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    if (!save || !load)
      fail(Errc::invalid_argument,
           std::string(!save ? "save" : "load") + " is NULL: both callbacks are required");
    accelerator->session->register_custom({save, load, user_data});
  });
}

}  // extern "C"
