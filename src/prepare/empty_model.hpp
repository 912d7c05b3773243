// accel_prepare of a model built empty (accel_model_new_empty, Accelerate's init_empty_weights)
// under ZeRO stage 3: no rank ever holds the whole model. Each rank allocates only what stage 3
// leaves on it between steps (the parameters it owns; the ones stage 3 keeps whole, and buffers,
// whole), every tensor still empty until the collective load after accel_prepare reads each
// rank's bytes straight into its share (checkpoint/sharded_load.hpp). Under the other stages an
// empty model is refused: there every rank holds the whole model, so it is loaded first.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "model/model.hpp"
#include "runtime/accelerator.hpp"

namespace accel::prepare {

// Whether `m` is to be prepared empty: false when none of its tensors is. Every rank returns the
// same, or every rank fails alike with accel::Error(state): an empty model outside ZeRO stage 3
// over several processes (load it first, or use stage 3), a host's model (stage 3 keeps the host's
// parameters whole: materialize or load them first), or a model empty on some ranks only.
bool prepare_empty(runtime::Accelerator& acc, const model::Model& m);

// Gives every empty tensor of `m` its storage on `device`, each left still empty for require_filled
// (Model::allocate_unloaded): a trainable parameter that stage 3 shards (`sharded`, of `params`,
// owned by `owners`) all of it on its owner and none elsewhere, never the whole tensor on the
// others; every other tensor whole.
void allocate_shares(model::Model& m, const std::vector<at::Tensor>& params,
                     const std::vector<int>& owners, const std::vector<bool>& sharded, int rank,
                     const at::Device& device);

}  // namespace accel::prepare
