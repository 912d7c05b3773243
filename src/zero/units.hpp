// ZeRO stage 3's units (FSDP's wrapped modules): the groups of parameters gathered together just
// before a module's forward and freed after it. Chosen as Accelerate's auto-wrap policies choose
// them (fsdp_auto_wrap_policy): TRANSFORMER_BASED_WRAP makes a unit of every submodule whose class
// is named in fsdp_transformer_layer_cls_to_wrap, SIZE_BASED_WRAP of every submodule holding at
// least fsdp_min_num_params parameters not already in a smaller unit (bottom-up), NO_WRAP of none;
// DeepSpeed's stage 3 of every submodule that has parameters of its own.
// The root is always a unit: it holds every parameter no other unit holds, gathered for the whole
// forward and the whole backward.
//
// A submodule is only made a unit when its parameters are used by nothing but its own methods and
// it returns one tensor (where the exit hook goes): a parameter read from another module's method
// (tied weights), or a method returning a tuple, leaves it to its parent unit, and the reason is
// reported. Its methods are then called between accel::unit_enter and accel::unit_exit, which
// instrument() inserts into the TorchScript graphs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "config/sharding.hpp"

namespace torch::jit {
struct Module;
}

namespace accel::zero {

struct UnitPlan {
  struct Unit {
    std::string name;              // the submodule's path ("" for the root)
    const void* object = nullptr;  // the submodule (its TorchScript object); null for the root
    std::vector<size_t> params;    // indices into the parameters choose_units was given
  };
  std::vector<Unit> units;         // units[0] is the root
  std::vector<std::string> notes;  // submodules the policy chose but that could not be units, why
};

// The units of `root` over `params` (its trainable parameters; another parameter belongs to no
// unit). accel::Error(config) when TRANSFORMER_BASED_WRAP names no class, or a class the model
// does not have (as Accelerate).
UnitPlan choose_units(const torch::jit::Module& root, const std::vector<at::Tensor>& params,
                      const config::ShardingPlan& plan);

// Inserts accel::unit_enter(module) before and accel::unit_exit(module, output) after every call
// of a method of a submodule that is one of `units`' objects' classes, in every method of `root`
// and its submodules not instrumented yet (a call already followed by unit_exit is left alone).
void instrument(torch::jit::Module& root, const UnitPlan& units);

}  // namespace accel::zero
