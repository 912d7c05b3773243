// Models are TorchScript modules: loaded from an archive, or built here from a catalogue of layers
// (initialised exactly as the matching torch.nn layer) plus methods written in TorchScript source.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "model/host_tensors.hpp"

namespace torch::jit {
struct Module;
struct CompilationUnit;
}  // namespace torch::jit

namespace accel::model {

// Accelerate's init_empty_weights: layers added to the model get their parameters on the meta
// device (a shape and a dtype, no storage); buffers too with include_buffers, else they are made
// and initialised on the CPU as usual (Accelerate's default, ACCELERATE_INIT_INCLUDE_BUFFERS).
struct EmptyInit {
  bool include_buffers = false;
};

// How a layer initialises one of its tensors (torch.nn's reset_parameters for it), applied to an
// allocated tensor of its shape and dtype.
using Init = std::function<void(at::Tensor&)>;

class Model {
 public:
  // An empty module to which layers and methods are added.
  Model();
  // The same, its layers built empty (EmptyInit): filled later by a load (fill, initialize_empty).
  explicit Model(EmptyInit empty);
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

  // accel::Error(state), naming it, `what` and how to fill it, when a tensor (`name`; every one
  // when empty) is still empty (meta: an empty build, an emptied host tensor). Free once the model
  // was found full.
  void require_filled(const std::string& what, const std::string& name = "") const;
  // Gives the empty tensor `t` of this model `value` in place (materialize.hpp).
  void fill(const at::Tensor& t, const at::Tensor& value);
  // Every tensor still empty whose layer's initialisation is known (an empty build's layers) is
  // allocated on the CPU and initialised as its layer would have at build time; returns their
  // names. Host and archive tensors have none: they stay empty.
  std::vector<std::string> initialize_empty();

  // ZeRO stage 3's prepare of an empty model (prepare/empty_model.hpp): the empty tensor `t` gets
  // `value`'s storage (this rank's share of it: all of it where this rank owns `t`, none where
  // another rank does) and stays still empty for require_filled until mark_loaded, or
  // initialize_unloaded, fills it.
  void allocate_unloaded(const at::Tensor& t, const at::Tensor& value);
  bool has_unloaded() const { return !unloaded_.empty(); }
  bool is_unloaded(const at::Tensor& t) const { return unloaded_.count(t.unsafeGetTensorImpl()); }
  // The tensors named are filled (a load wrote them on the ranks that hold them).
  void mark_loaded(const std::vector<std::string>& names);
  // initialize_empty for the allocated tensors still unloaded: each computed whole on the CPU
  // from the default generator in the same order as initialize_empty (so every rank draws alike,
  // and as a single process would) and kept where this rank holds the tensor. Returns their names.
  std::vector<std::string> initialize_unloaded();

 private:
  // The first still-empty tensor (`name`; any when empty), whether it is a meta one, and how many
  // there are; allocated but unloaded ones count with `unloaded`.
  std::string first_empty(const std::string& name, bool unloaded, size_t* count,
                          bool* meta = nullptr) const;

  // The class types of the modules built here, each of its own name (mangled: Linear,
  // ___torch_mangle_1.Linear, ...). One name for many types, each in a compilation unit of its
  // own, made LibTorch 1.13's alias analysis grow exponentially with the layers a method calls
  // (a forward through 28 layers took 12 GB to compile).
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  std::unique_ptr<torch::jit::Module> module_;
  HostTensors host_;
  bool loaded_ = false;  // from an archive: its submodules may share class types
  uint64_t revision_ = 0;
  std::optional<EmptyInit> empty_;            // layers are built empty
  std::map<std::string, Init> inits_;         // the empty layer tensors' initialisations, by name
  mutable bool may_be_empty_ = false;         // false once a check found every tensor filled
  std::unordered_set<const void*> unloaded_;  // TensorImpls of allocate_unloaded's, not yet filled
};

// Parses "a=1 b=2,c=3" into a map; throws accel::Error(invalid_argument) naming a malformed entry.
std::map<std::string, std::string> parse_spec(const std::string& spec);

}  // namespace accel::model
