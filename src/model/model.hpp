// Models are TorchScript modules: loaded from an archive, or built here from a catalogue of layers
// (initialised exactly as the matching torch.nn layer) plus methods written in TorchScript source.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/host_tensors.hpp"

namespace torch::jit {
struct Module;
}

namespace accel::model {

class Model {
 public:
  // An empty module to which layers and methods are added.
  Model();
  // A TorchScript archive (torch.jit.save, tch-rs, or save()). Throws accel::Error(io) naming the
  // path.
  static std::unique_ptr<Model> load(const std::string& path);
  ~Model();

  // Adds a layer from the catalogue: linear, conv2d, batch_norm2d, layer_norm, embedding.
  // `spec` is "key=value" pairs separated by spaces or commas, e.g. "in_features=784
  // out_features=10".
  void add_layer(const std::string& name, const std::string& kind, const std::string& spec);
  // Compiles TorchScript source: methods of the model (forward, training_step, ...).
  void define(const std::string& source);
  // Lends the host's tensor `t` to the model as parameter (or buffer) `name`, no copy: the model's
  // tensor is the host's (the same TensorImpl), so whatever training does to it the host sees.
  // Dotted names ("fc1.weight") make the submodules on the way. Checks: see HostTensors::admit;
  // a name the model has, or a model loaded from an archive, is accel::Error(invalid_argument).
  // All or nothing.
  void add_host_tensor(const std::string& name, const at::Tensor& t, bool is_buffer);
  // The host's tensors lent with add_host_tensor (empty for a layer or TorchScript model).
  HostTensors& host_tensors() { return host_; }
  const HostTensors& host_tensors() const { return host_; }

  std::vector<at::Tensor> call(const std::string& method, const std::vector<at::Tensor>& inputs);

  void train(bool on);
  bool is_training() const;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> named_buffers() const;
  // Parameters first, then buffers, each in registration order.
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const;
  int64_t num_parameters() const;
  void save(const std::string& path) const;
  void to(const std::string& device);

  torch::jit::Module& module() { return *module_; }
  // Counts the changes to the model's layers, tensors and methods (add_layer, add_host_tensor,
  // define).
  uint64_t revision() const { return revision_; }

  // accel::Error(state), naming it and `what`, when a parameter (`name`; every one when empty)
  // is not on this rank: ZeRO stage 3 released it (see zero/param_shard.hpp).
  void require_whole(const std::string& what, const std::string& name = "") const;

 private:
  std::unique_ptr<torch::jit::Module> module_;
  HostTensors host_;
  bool loaded_ = false;  // from an archive: its submodules may share class types
  uint64_t revision_ = 0;
};

// Parses "a=1 b=2,c=3" into a map; throws accel::Error(invalid_argument) naming a malformed entry.
std::map<std::string, std::string> parse_spec(const std::string& spec);

}  // namespace accel::model
