// Models are TorchScript modules: loaded from an archive, or built here from a catalogue of layers
// (initialised exactly as the matching torch.nn layer) plus methods written in TorchScript source.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

 private:
  std::unique_ptr<torch::jit::Module> module_;
};

// Parses "a=1 b=2,c=3" into a map; throws accel::Error(invalid_argument) naming a malformed entry.
std::map<std::string, std::string> parse_spec(const std::string& spec);

}  // namespace accel::model
