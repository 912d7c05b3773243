// A model's module tree as device_map.hpp describes it: each module's class name (Accelerate's
// module.__class__.__name__: a catalogue layer's "Linear", a TorchScript class's unqualified
// name), its own parameters and buffers with their bytes (meta tensors count as they will be
// loaded), and tied tensors (one storage under several names) sharing an id.
#pragma once

namespace torch::jit {
struct Module;
}

#include "bigmodel/device_map.hpp"

namespace accel::bigmodel {

ModuleTree module_tree(const torch::jit::Module& root);

}  // namespace accel::bigmodel
