#include "model/model.hpp"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/nn/init.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "model/materialize.hpp"

namespace accel::model {

namespace {

// From the second call on, the profiling executor fuses a method's whole backward into one node, so
// every gradient would arrive at the end of backward and none of the all-reduce could overlap it.
// Keeping per-op autograd nodes cost nothing measurable on this machine.
void configure_jit_once() {
  static std::once_flag once;
  std::call_once(once, [] { torch::jit::setGraphExecutorOptimize(false); });
}

// ZeRO stage 3's hooks (accel::unit_enter/unit_exit, zero/units.hpp) in a graph; with `strip`,
// taken out: an archive must load where libaccel is not.
bool is_hook(const torch::jit::Node* n) {
  return std::string(n->kind().toQualString()).rfind("accel::", 0) == 0;
}

bool hooks_in(torch::jit::Block* b, bool strip) {
  bool found = false;
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    torch::jit::Node* n = *it++;
    for (auto* sub : n->blocks()) found = hooks_in(sub, strip) || found;
    if (!is_hook(n)) continue;
    found = true;
    if (!strip) continue;
    if (n->outputs().size() == 1) n->output()->replaceAllUsesWith(n->inputs().back());
    n->destroy();
  }
  return found;
}

bool hooks_in(const torch::jit::Module& m, bool strip) {
  bool found = false;
  for (const auto& sub : m.modules())
    for (torch::jit::Function* f : sub.type()->methods())
      if (auto* g = torch::jit::tryToGraphFunction(*f))
        found = hooks_in(g->graph()->block(), strip) || found;
  return found;
}

std::string errors_of(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

class Spec {
 public:
  Spec(const std::string& kind, const std::string& text) : kind_(kind), map_(parse_spec(text)) {}
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (fallback) return *fallback;
      fail(Errc::invalid_argument, kind_ + " layer: '" + key + "' is required");
    }
    used_.push_back(key);
    long long v = 0;
    if (parse_int(it->second, &v)) return v;
    fail(Errc::invalid_argument,
         kind_ + " layer: '" + key + "=" + it->second + "' is not an integer");
  }
  // A size or count: below `min` is refused here, naming the key, not deep inside LibTorch.
  int64_t at_least(int64_t min, const std::string& key,
                   std::optional<int64_t> fallback = std::nullopt) {
    const int64_t v = integer(key, fallback);
    if (v < min)
      fail(Errc::invalid_argument, kind_ + " layer: '" + key + "=" + std::to_string(v) +
                                       "' must be at least " + std::to_string(min));
    return v;
  }
  double real(const std::string& key, double fallback) {
    auto it = map_.find(key);
    if (it == map_.end()) return fallback;
    used_.push_back(key);
    double v = 0;
    if (parse_real(it->second, &v)) return v;
    fail(Errc::invalid_argument,
         kind_ + " layer: '" + key + "=" + it->second + "' is not a number");
  }
  bool flag(const std::string& key, bool fallback) {
    auto it = map_.find(key);
    if (it == map_.end()) return fallback;
    used_.push_back(key);
    if (it->second == "true" || it->second == "1") return true;
    if (it->second == "false" || it->second == "0") return false;
    fail(Errc::invalid_argument,
         kind_ + " layer: '" + key + "=" + it->second + "' is not true/false");
  }
  // Every key given must have been read: a typo is an error, not a default in silence.
  void finish(const std::string& known) {
    for (const auto& [k, v] : map_)
      if (std::find(used_.begin(), used_.end(), k) == used_.end())
        fail(Errc::invalid_argument, kind_ + " layer: unknown option '" + k + "'; known: " + known);
  }

 private:
  std::string kind_;
  std::map<std::string, std::string> map_;
  std::vector<std::string> used_;
};

torch::jit::Module new_module(const std::string& cls,
                              const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  torch::jit::Module m(c10::QualifiedName("__torch__.accel." + cls), cu, /*shouldMangle=*/true);
  // eval()/train() silently do nothing on a module without this attribute.
  m.register_attribute("training", c10::BoolType::get(), true);
  return m;
}

// A layer's tensors as its builder declares them, each with its initialisation (torch.nn's for
// that layer): allocated and initialised at once, in declaration order (so the random stream is
// torch.nn's), or, in an empty build, left on the meta device with the initialisation kept for a
// load that finds no value for it.
class Layer {
 public:
  Layer(const std::string& cls, const std::shared_ptr<torch::jit::CompilationUnit>& cu,
        const EmptyInit* empty)
      : module_(new_module(cls, cu)), empty_(empty) {}
  void parameter(const std::string& name, at::IntArrayRef shape, const Init& init) {
    module_.register_parameter(name, make(name, shape, at::kFloat, init, true).requires_grad_(true),
                               /*is_buffer=*/false);
  }
  void buffer(const std::string& name, at::IntArrayRef shape, at::ScalarType dtype,
              const Init& init) {
    const bool meta = empty_ && empty_->include_buffers;
    module_.register_buffer(name, make(name, shape, dtype, init, meta));
  }
  torch::jit::Module& module() { return module_; }
  std::vector<std::pair<std::string, Init>>& inits() { return inits_; }

 private:
  at::Tensor make(const std::string& name, at::IntArrayRef shape, at::ScalarType dtype,
                  const Init& init, bool meta_if_empty) {
    const auto options = at::TensorOptions().dtype(dtype);
    if (empty_ && meta_if_empty) {
      inits_.emplace_back(name, init);
      return at::empty(shape, options.device(at::kMeta));
    }
    at::Tensor t = at::empty(shape, options);
    torch::NoGradGuard no_grad;
    init(t);
    return t;
  }
  torch::jit::Module module_;
  const EmptyInit* empty_;
  std::vector<std::pair<std::string, Init>> inits_;
};

// torch.nn.Linear's and ConvNd's reset_parameters: kaiming_uniform_(a=sqrt(5)) for the weight and
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias.
void kaiming(at::Tensor& w) {
  torch::nn::init::kaiming_uniform_(w, std::sqrt(5.0));
}
Init fan_in_uniform(int64_t fan_in) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return [bound](at::Tensor& b) { torch::nn::init::uniform_(b, -bound, bound); };
}
void ones(at::Tensor& t) {
  t.fill_(1);
}
void zeros(at::Tensor& t) {
  t.zero_();
}

// A double as a TorchScript float literal. format_real, not an ostream: under a global C++ locale
// such as de_DE an ostream writes 0.1 as "0,1", which TorchScript reads as two arguments. The
// shortest round-trip text parses back to the same double; "1" gets ".0" so it stays a float.
std::string fmt(double v) {
  std::string s = format_real(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// The layer kinds of the catalogue (Model::add_layer), each built by its own function from its
// options; each builder reads its options with `s` and calls s.finish with the keys it knows.
void build_linear(Spec& s, Layer& l) {
  const int64_t in = s.at_least(1, "in_features"), out = s.at_least(1, "out_features");
  const bool bias = s.flag("bias", true);
  s.finish("in_features, out_features, bias");
  l.parameter("weight", {out, in}, kaiming);
  if (bias) l.parameter("bias", {out}, fan_in_uniform(in));
  l.module().define(
      bias ? "def forward(self, x):\n    return torch.linear(x, self.weight, self.bias)\n"
           : "def forward(self, x):\n    return torch.linear(x, self.weight)\n");
}

void build_conv2d(Spec& s, Layer& l) {
  const int64_t in = s.at_least(1, "in_channels"), out = s.at_least(1, "out_channels");
  const int64_t k = s.at_least(1, "kernel_size"), stride = s.at_least(1, "stride", 1);
  const int64_t pad = s.at_least(0, "padding", 0), dil = s.at_least(1, "dilation", 1);
  const int64_t groups = s.at_least(1, "groups", 1);
  const bool bias = s.flag("bias", true);
  s.finish("in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias");
  if (groups < 1 || in % groups || out % groups)
    fail(Errc::invalid_argument, "conv2d layer: channels must divide by groups");
  l.parameter("weight", {out, in / groups, k, k}, kaiming);
  if (bias) l.parameter("bias", {out}, fan_in_uniform(in / groups * k * k));
  const std::string geo = "[" + std::to_string(stride) + ", " + std::to_string(stride) + "], [" +
                          std::to_string(pad) + ", " + std::to_string(pad) + "], [" +
                          std::to_string(dil) + ", " + std::to_string(dil) + "], " +
                          std::to_string(groups);
  l.module().define("def forward(self, x):\n    return torch.conv2d(x, self.weight, " +
                    std::string(bias ? "self.bias" : "None") + ", " + geo + ")\n");
}

void build_batch_norm2d(Spec& s, Layer& l) {
  const int64_t n = s.at_least(1, "num_features");
  const double eps = s.real("eps", 1e-5), momentum = s.real("momentum", 0.1);
  s.finish("num_features, eps, momentum");
  l.parameter("weight", {n}, ones);
  l.parameter("bias", {n}, zeros);
  l.buffer("running_mean", {n}, at::kFloat, zeros);
  l.buffer("running_var", {n}, at::kFloat, ones);
  l.buffer("num_batches_tracked", {}, at::kLong, zeros);
  l.module().define(
      "def forward(self, x):\n"
      "    if self.training:\n"
      "        self.num_batches_tracked.add_(1)\n"
      "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, "
      "self.running_var, self.training, " +
      fmt(momentum) + ", " + fmt(eps) + ", False)\n");
}

void build_layer_norm(Spec& s, Layer& l) {
  const int64_t n = s.at_least(1, "normalized_shape");
  const double eps = s.real("eps", 1e-5);
  s.finish("normalized_shape, eps");
  l.parameter("weight", {n}, ones);
  l.parameter("bias", {n}, zeros);
  // Under autocast a bf16 input meets fp32 weights, which 1.13's CPU kernel refuses; 2.x's
  // autocast runs layer_norm in fp32, and so does this.
  l.module().define(
      "def forward(self, x):\n    if x.dtype != self.weight.dtype:\n"
      "        x = x.to(self.weight.dtype)\n    return torch.layer_norm(x, [" +
      std::to_string(n) + "], self.weight, self.bias, " + fmt(eps) + ")\n");
}

void build_embedding(Spec& s, Layer& l) {
  const int64_t num = s.at_least(1, "num_embeddings"), dim = s.at_least(1, "embedding_dim");
  s.finish("num_embeddings, embedding_dim");
  // torch.nn.Embedding: N(0, 1)
  l.parameter("weight", {num, dim}, [](at::Tensor& w) { torch::nn::init::normal_(w); });
  l.module().define("def forward(self, x):\n    return torch.embedding(self.weight, x)\n");
}

// The catalogue: one row a layer kind, in the order the unknown-kind error lists them. A new kind:
// its builder above and a row here.
struct LayerRow {
  const char* kind;
  const char* cls;
  void (*build)(Spec& s, Layer& l);
};
const LayerRow kLayers[] = {
    {"linear", "Linear", build_linear},
    {"conv2d", "Conv2d", build_conv2d},
    {"batch_norm2d", "BatchNorm2d", build_batch_norm2d},
    {"layer_norm", "LayerNorm", build_layer_norm},
    {"embedding", "Embedding", build_embedding},
};

// The layer, and for an empty build the initialisation of each tensor left empty.
std::pair<torch::jit::Module, std::vector<std::pair<std::string, Init>>> make_layer(
    const std::string& kind, const std::string& text,
    const std::shared_ptr<torch::jit::CompilationUnit>& cu, const EmptyInit* empty) {
  Spec s(kind, text);
  std::string known;
  for (const LayerRow& row : kLayers) {
    if (kind == row.kind) {
      Layer l(row.cls, cu, empty);
      row.build(s, l);
      return {l.module(), std::move(l.inits())};
    }
    known += (known.empty() ? "" : ", ") + std::string(row.kind);
  }
  fail(Errc::invalid_argument, "unknown layer kind '" + kind + "'; the catalogue has " + known);
}

}  // namespace

std::map<std::string, std::string> parse_spec(const std::string& spec) {
  std::map<std::string, std::string> out;
  std::string item;
  auto take = [&](const std::string& entry) {
    if (entry.empty()) return;
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size())
      fail(Errc::invalid_argument, "layer option '" + entry + "' is not key=value");
    out[entry.substr(0, eq)] = entry.substr(eq + 1);
  };
  for (char c : spec) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n') {
      take(item);
      item.clear();
    } else {
      item += c;
    }
  }
  take(item);
  return out;
}

Model::Model()
    : cu_(std::make_shared<torch::jit::CompilationUnit>()),
      module_(std::make_unique<torch::jit::Module>(new_module("Model", cu_))) {
  configure_jit_once();
}

Model::Model(EmptyInit empty) : Model() {
  empty_ = empty;
}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
  configure_jit_once();
  auto m = std::make_unique<Model>();
  try {
    *m->module_ = torch::jit::load(path);
    m->loaded_ = true;
  } catch (const std::exception& e) {
    fail(Errc::io, "cannot load the TorchScript archive '" + path + "': " + errors_of(e));
  }
  return m;
}

void Model::add_layer(const std::string& name, const std::string& kind, const std::string& spec) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    fail(Errc::invalid_argument, "layer name '" + name + "' is not an identifier");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      fail(Errc::invalid_argument, "layer name '" + name + "' is not an identifier");
  if (module_->hasattr(name)) fail(Errc::invalid_argument, "the model already has '" + name + "'");
  auto [layer, inits] = make_layer(kind, spec, cu_, empty_ ? &*empty_ : nullptr);
  layer.train(module_->is_training());
  module_->register_module(name, layer);
  for (auto& [tensor, init] : inits) inits_[name + "." + tensor] = std::move(init);
  if (!inits.empty()) may_be_empty_ = true;
  ++revision_;
}

void Model::add_host_tensor(const std::string& name, const at::Tensor& t, bool is_buffer) {
  // An archive's submodules of one kind share one class type: an attribute added to one would be
  // added to the type of all, whose objects have no slot for it.
  if (loaded_)
    fail(Errc::invalid_argument,
         "cannot add '" + name +
             "' to a model loaded from a TorchScript archive: lend the host's tensors to a model "
             "made with accel_model_new");
  const auto path = split_tensor_name(name);
  // Where it goes, without changing anything yet: every segment but the last names a submodule
  // (made below where missing), the last is free.
  torch::jit::Module parent = *module_;
  size_t made_from = path.size() - 1;  // the first segment whose submodule is missing
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!parent.hasattr(path[i])) {
      made_from = i;
      break;
    }
    const c10::IValue v = parent.attr(path[i]);
    if (!v.isModule())
      fail(Errc::invalid_argument, "cannot add '" + name + "': '" + path[i] +
                                       "' is a tensor or attribute of the model, not a submodule");
    parent = v.toModule();
  }
  if (made_from == path.size() - 1 && parent.hasattr(path.back()))
    fail(Errc::invalid_argument, "the model already has '" + name + "'");
  host_.admit(name, t, /*is_parameter=*/!is_buffer, named_tensors());
  if (is_empty(t)) may_be_empty_ = true;
  try {
    for (size_t i = made_from; i + 1 < path.size(); ++i) {
      torch::jit::Module sub = new_module("HostModule", cu_);
      sub.train(module_->is_training());
      parent.register_module(path[i], sub);
      parent = sub;
    }
    parent.register_parameter(path.back(), t, is_buffer);
    ++revision_;
  } catch (const std::exception& e) {
    host_.forget_last();
    fail(Errc::invalid_argument, "cannot add '" + name + "': " + errors_of(e));
  }
}

void Model::define(const std::string& source) {
  try {
    // All or nothing: Module::define adds each method as it compiles, so a source whose second
    // method fails would leave the first. Compile into a clone first (its own class type; the
    // tensors are shared, not copied), and into the model only when every method compiled.
    module_->clone(/*inplace=*/true).define(source);
    module_->define(source);
    ++revision_;
  } catch (const std::exception& e) {
    fail(Errc::invalid_argument, "TorchScript source does not compile: " + errors_of(e));
  }
}

void Model::require_whole(const std::string& what, const std::string& name) const {
  for (const auto& [n, p] : named_parameters()) {
    if (!name.empty() && n != name) continue;
    if (p.numel() == 0 || p.storage().nbytes() > 0) continue;
    fail(Errc::state, what + ": parameter '" + n +
                          "' is not on this rank: under ZeRO stage 3 (FSDP FULL_SHARD) each rank "
                          "holds only the parameters it owns between steps. accel_save_model "
                          "gathers the whole model (every rank calls it); after the accelerator "
                          "is freed, load that file into a new model");
  }
}

std::string Model::first_empty(const std::string& name, bool unloaded, size_t* count,
                               bool* meta) const {
  std::string first;
  *count = 0;
  for (const auto& [n, t] : named_tensors()) {
    if (!name.empty() && n != name) continue;
    if (!is_empty(t) && !(unloaded && unloaded_.count(t.unsafeGetTensorImpl()))) continue;
    if (first.empty()) {
      first = n;
      if (meta) *meta = is_empty(t);
    }
    ++*count;
  }
  return first;
}

void Model::require_filled(const std::string& what, const std::string& name) const {
  if (!may_be_empty_) return;
  size_t count = 0;
  bool meta = true;
  const std::string first = first_empty(name, /*unloaded=*/true, &count, &meta);
  if (count == 0) {
    if (name.empty()) may_be_empty_ = false;
    return;
  }
  fail(Errc::state,
       what + ": '" + first + "'" +
           (count > 1 ? " and " + std::to_string(count - 1) + " other tensor(s)" : "") +
           " of the model " + (count > 1 ? "are" : "is") + " still empty (" +
           (meta ? "built without its weights, on the meta device"
                 : "built without its weights; ZeRO stage 3 allocated only this rank's share and "
                   "nothing was loaded into it yet") +
           "): " + how_to_fill());
}

void Model::fill(const at::Tensor& t, const at::Tensor& value) {
  materialize(t, value);
}

std::vector<std::string> Model::initialize_empty() {
  std::vector<std::string> done;
  if (inits_.empty()) return done;
  for (const auto& [n, t] : named_tensors()) {
    const auto it = inits_.find(n);
    if (it == inits_.end() || !is_empty(t)) continue;
    at::Tensor value = at::empty(t.sizes(), t.options().device(at::kCPU));
    {
      torch::NoGradGuard no_grad;
      it->second(value);
    }
    materialize(t, value);
    done.push_back(n);
  }
  return done;
}

std::vector<at::Tensor> Model::call(const std::string& method,
                                    const std::vector<at::Tensor>& inputs) {
  require_filled("the model's '" + method + "'");
  auto m = module_->find_method(method);
  if (!m && !host_.empty())
    fail(Errc::invalid_argument,
         "the model has no method '" + method +
             "': its tensors are the host's, and so is its forward (run it between "
             "accel_model_forward_begin and accel_model_forward_end)");
  if (!m) fail(Errc::invalid_argument, "the model has no method '" + method + "'");
  std::vector<c10::IValue> stack(inputs.begin(), inputs.end());
  c10::IValue result;
  take_op_error();  // none of an earlier call's
  try {
    result = (*m)(std::move(stack));
  } catch (const std::exception& e) {
    // libaccel's own op failed (a gather whose peer died): its error, with its code.
    if (const auto ours = take_op_error())
      fail(ours->code(), "the model's '" + method + "' failed: " + ours->what());
    // TorchScript reports both kinds of mismatch in prose; tell the program which it was.
    const std::string text = errors_of(e);
    if (is_out_of_memory_message(text.c_str()))
      fail(Errc::out_of_memory, "the model's '" + method + "' failed: " + text);
    const bool dtype = text.find("scalar type") != std::string::npos ||
                       text.find("dtype") != std::string::npos ||
                       text.find("expected type") != std::string::npos ||
                       text.find("Expected a value of type") != std::string::npos;
    fail(dtype ? Errc::dtype : Errc::shape, "the model's '" + method + "' failed: " + text);
  }
  std::vector<at::Tensor> out;
  if (result.isTensor()) {
    out.push_back(result.toTensor());
  } else if (result.isTuple()) {
    for (const auto& v : result.toTupleRef().elements()) {
      if (!v.isTensor())
        fail(Errc::invalid_argument, "'" + method + "' returned a tuple with a non-tensor element");
      out.push_back(v.toTensor());
    }
  } else if (result.isTensorList()) {
    for (const auto& t : result.toTensorVector()) out.push_back(t);
  } else if (!result.isNone()) {
    fail(Errc::invalid_argument, "'" + method + "' returned " + result.tagKind() +
                                     "; methods called through libaccel return tensors");
  }
  return out;
}

void Model::train(bool on) {
  module_->train(on);
}

bool Model::is_training() const {
  return module_->is_training();
}

std::vector<std::pair<std::string, at::Tensor>> Model::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module_->named_parameters(/*recurse=*/true))
    out.emplace_back(p.name, p.value);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Model::named_buffers() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& b : module_->named_buffers(/*recurse=*/true)) out.emplace_back(b.name, b.value);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Model::named_tensors() const {
  auto all = named_parameters();
  for (auto& b : named_buffers()) all.push_back(std::move(b));
  return all;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : module_->parameters(true)) n += p.numel();
  return n;
}

void Model::save(const std::string& path) const {
  require_whole("saving the model as TorchScript");
  require_filled("saving the model as TorchScript");
  if (!host_.empty())
    fail(Errc::state,
         "a model of host-owned tensors has no TorchScript code to save: its forward is the "
         "host's; save its weights with accel_save_model (safetensors)");
  try {
    if (hooks_in(*module_, /*strip=*/false)) {
      torch::jit::Module plain = module_->clone(/*inplace=*/true);  // the same tensors
      hooks_in(plain, /*strip=*/true);
      plain.save(path);
    } else {
      module_->save(path);
    }
  } catch (const std::exception& e) {
    fail(Errc::io, "cannot save the model to '" + path + "': " + errors_of(e));
  }
}

void Model::to(const std::string& device) {
  // Allocated unloaded tensors may move (stage 3 allocates them on the device already); meta
  // ones have nothing to move.
  size_t count = 0;
  if (may_be_empty_ && !first_empty("", /*unloaded=*/false, &count).empty())
    require_filled("moving the model to " + device);
  module_->to(at::Device(device));
}

}  // namespace accel::model
