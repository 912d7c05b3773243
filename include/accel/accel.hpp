/*
 * accel.hpp - the C++ interface of libaccel: header-only, over accel.h alone.
 *
 * The same library, the same ABI, the same rules as accel.h (read its Conventions); in C++ terms:
 *  - Handles are move-only RAII objects (accel::Accelerator, accel::Model, ...); the destructor is
 *    the matching accel_<type>_free.
 *  - A failing call throws accel::Error, which carries the accel_status and the library's message.
 *  - Text and arrays are std::string and std::vector; a batch is a std::vector<accel::Tensor>.
 *
 * With LibTorch (define ACCEL_WITH_TORCH before including this header, and link LibTorch):
 *  - accel::Tensor converts from and to torch::Tensor without a copy (the same storage).
 *  - accel::Model::from_module(module) lends a torch::nn::Module's parameters and buffers to a
 *    model, by their names ("conv1.weight"); the forward stays the module's own, run inside
 *    model.forward() (a scope) for mixed precision and buffer broadcast. See accel.h, "Models of
 *    the host's own tensors".
 *  - accel::to_meta(module) empties a module's tensors in place (init_empty_weights) for a load to
 *    fill; accel::materialize(t, value) fills one the load did not.
 *  - accel::check_torch() (called by both) refuses a program whose LibTorch is not the very build
 *    libaccel runs on, naming both: LibTorch objects cannot cross between two builds.
 */
#ifndef ACCEL_ACCEL_HPP
#define ACCEL_ACCEL_HPP

#include <accel/accel.h>
#include <accel/options.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef ACCEL_WITH_TORCH
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/csrc/api/include/torch/version.h>
#endif
#endif

namespace accel {

/** A failed call: the status (ACCEL_ERR_*) and the library's message. */
class Error : public std::runtime_error {
 public:
  Error(accel_status status, const std::string& message)
      : std::runtime_error(std::string(accel_status_name(status)) + ": " + message),
        status_(status) {}
  accel_status status() const noexcept { return status_; }

 private:
  accel_status status_;
};

namespace detail {

inline void check(accel_status status) {
  if (status != ACCEL_OK) throw Error(status, accel_last_error_message());
}

// Text through the buffer convention: ask for the size, then fill.
template <class F>
std::string text(F&& call) {
  size_t size = 0;
  const accel_status first = call(nullptr, 0, &size);
  if (first != ACCEL_OK && first != ACCEL_ERR_BUFFER_TOO_SMALL) check(first);
  std::string out(size, '\0');
  check(call(out.data(), out.size(), &size));
  out.resize(size > 0 ? size - 1 : 0);  // without the NUL
  return out;
}

// A query through one output parameter: fn(handle, &value).
template <class T, class F, class H>
T query(F fn, H handle) {
  T value{};
  check(fn(handle, &value));
  return value;
}

// Runs a program's callback for the C side: 0, or -1 after handing `on_error` the message of the
// exception it threw (no exception crosses the C ABI; the call that reached it reports it).
template <class F, class OnError>
int32_t run_callback(F&& f, OnError&& on_error) noexcept {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    on_error(e.what());
  } catch (...) {
    on_error("an exception that is not a std::exception");
  }
  return -1;
}

// The items of a bytes list the caller owns (freed here).
inline std::vector<std::string> take_bytes_list(accel_bytes_list* raw);

// One owned handle; the destructor frees it.
template <class T, void (*Free)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* p) : p_(p) {}
  Handle(Handle&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Free(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Free(p_); }
  T* get() const { return p_; }
  T* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

inline std::vector<std::string> take_bytes_list(accel_bytes_list* raw) {
  Handle<accel_bytes_list, accel_bytes_list_free> list(raw);
  std::vector<std::string> out(query<size_t>(accel_bytes_list_count, list.get()));
  for (size_t i = 0; i < out.size(); ++i) {
    const void* data = nullptr;
    size_t size = 0;
    check(accel_bytes_list_get(list.get(), i, &data, &size));
    out[i].assign(static_cast<const char*>(data), size);
  }
  return out;
}

template <class T>
constexpr accel_dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return ACCEL_DTYPE_F32;
  else if constexpr (std::is_same_v<T, double>)
    return ACCEL_DTYPE_F64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ACCEL_DTYPE_I64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ACCEL_DTYPE_I32;
  else if constexpr (std::is_same_v<T, int16_t>)
    return ACCEL_DTYPE_I16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return ACCEL_DTYPE_I8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return ACCEL_DTYPE_U8;
  else if constexpr (std::is_same_v<T, bool>)
    return ACCEL_DTYPE_BOOL;
  else
    static_assert(sizeof(T) == 0, "no accel_dtype for this element type");
}

// Whether the exception being handled is running out of memory, as find_executable_batch_size
// and the Trainer's auto_find_batch_size count it: an Error with ACCEL_ERR_OUT_OF_MEMORY,
// std::bad_alloc, or an exception whose message is LibTorch's "out of memory". Call it inside a
// catch block.
inline bool handling_out_of_memory() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    return e.status() == ACCEL_ERR_OUT_OF_MEMORY;
  } catch (const std::bad_alloc&) {
    return true;
  } catch (const std::exception& e) {
    return std::strstr(e.what(), "out of memory") || std::strstr(e.what(), "can't allocate memory");
  } catch (...) {
    return false;
  }
}

}  // namespace detail

/** The library's version, "0.2.4". */
inline std::string version() {
  return accel_version();
}
/** The library's version as major * 10000 + minor * 100 + patch (ACCEL_VERSION_NUMBER's form). */
inline uint32_t version_number() {
  return accel_version_number();
}

#ifdef ACCEL_WITH_TORCH
/**
 * Throws Error(ACCEL_ERR_UNSUPPORTED) naming both builds when this program's LibTorch (its headers,
 * its C++ ABI, the libc10 it has loaded) is not the one libaccel runs on. Checked once.
 */
inline void check_torch() {
#ifdef _GLIBCXX_USE_CXX11_ABI
  const int32_t cxx11_abi = _GLIBCXX_USE_CXX11_ABI;
#else
  const int32_t cxx11_abi = -1;  // not libstdc++: nothing to compare
#endif
  static const accel_status status = accel_torch_check(
      TORCH_VERSION, cxx11_abi, reinterpret_cast<const void*>(&::c10::GetCPUAllocator));
  static const std::string message = status == ACCEL_OK ? "" : accel_last_error_message();
  if (status != ACCEL_OK) throw Error(status, message);
}

namespace detail {
// Tensor::set_data's body without its type check, which refuses meta on either side (LibTorch
// 1.13 and 2.x): `t` takes `value`'s storage, dtype and device in place (the same tensor object,
// its autograd identity kept).
inline void swap_data(const ::torch::Tensor& t, const ::torch::Tensor& value) {
  if (t.sizes() != value.sizes())
    throw Error(ACCEL_ERR_SHAPE, "accel: a tensor's data swapped for data of another shape");
  if (auto* meta = ::torch::autograd::impl::get_autograd_meta(t)) {
    std::lock_guard<std::mutex> lock(meta->mutex_);
    meta->grad_accumulator_.reset();  // as set_data when the device changes
  }
  t.unsafeGetTensorImpl()->shallow_copy_from(value.detach().getIntrusivePtr());
}
}  // namespace detail

/**
 * Empties `module`'s parameters and buffers in place (Accelerate's init_empty_weights for a
 * module already built): each keeps its object, name, shape, dtype and requires_grad, and its
 * storage is dropped for LibTorch's meta device. LibTorch's own module.to(torch::kMeta) throws
 * (its set_data refuses a meta tensor, 1.13 and 2.x). Empty each block right after building it
 * and the peak is one block, not the model. Lend it with Model::from_module, then
 * load_pretrained/load_checkpoint fills the module's own tensors.
 */
inline void to_meta(::torch::nn::Module& module) {
  ::torch::NoGradGuard no_grad;
  for (auto& p : module.parameters(/*recurse=*/true))
    if (p.defined() && !p.is_meta())
      detail::swap_data(p, ::torch::empty(p.sizes(), p.options().device(::torch::kMeta)));
  for (auto& b : module.buffers(/*recurse=*/true))
    if (b.defined() && !b.is_meta())
      detail::swap_data(b, ::torch::empty(b.sizes(), b.options().device(::torch::kMeta)));
}

/**
 * Fills the empty (meta) tensor `t` with `value` in place, as a load does: for a host's tensor a
 * checkpoint lacked (the host initialises it itself). Throws Error(ACCEL_ERR_STATE) when `t` is
 * not empty, Error(ACCEL_ERR_SHAPE) when the shapes differ.
 */
inline void materialize(const ::torch::Tensor& t, const ::torch::Tensor& value) {
  if (!t.is_meta()) throw Error(ACCEL_ERR_STATE, "accel::materialize: the tensor is not empty");
  detail::swap_data(t, value);
}
#endif

/** A tensor handle (a LibTorch tensor underneath). */
class Tensor {
 public:
  Tensor() = default;
  /** Takes ownership of a handle the C interface returned. */
  explicit Tensor(accel_tensor* owned) : h_(owned) {}
  /** A handle the library lends for a call (a Trainer step's batch): never freed here. */
  static Tensor borrowed(const accel_tensor* lent) {
    Tensor t(const_cast<accel_tensor*>(lent));
    t.owns_ = false;
    return t;
  }
  Tensor(Tensor&& o) noexcept : h_(std::move(o.h_)), owns_(std::exchange(o.owns_, true)) {}
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (!owns_) h_.release();
      h_ = std::move(o.h_);
      owns_ = std::exchange(o.owns_, true);
    }
    return *this;
  }
  ~Tensor() {
    if (!owns_) h_.release();
  }
  /** Gives the handle up (the caller frees it unless it was lent). */
  accel_tensor* release() { return h_.release(); }

  /** A CPU tensor of `shape` holding a copy of `values` (their count must match the shape). */
  template <class T>
  static Tensor from_data(const std::vector<T>& values, const std::vector<int64_t>& shape) {
    static_assert(!std::is_same_v<T, bool>, "use std::vector<uint8_t> with dtype U8 for flags");
    accel_tensor* t = nullptr;
    detail::check(accel_tensor_from_data(values.data(), values.size() * sizeof(T),
                                         detail::dtype_of<T>(), shape.data(), shape.size(), &t));
    return Tensor(t);
  }
  /** A scalar (no dimensions). */
  template <class T>
  static Tensor scalar(T value) {
    accel_tensor* t = nullptr;
    detail::check(accel_tensor_from_data(&value, sizeof(T), detail::dtype_of<T>(), nullptr, 0, &t));
    return Tensor(t);
  }

  /** The elements, row-major, converted to T's dtype only if it is the tensor's (else throws). */
  template <class T>
  std::vector<T> to_vector() const {
    if (dtype() != detail::dtype_of<T>())
      throw Error(ACCEL_ERR_DTYPE, "to_vector: the element type is not the tensor's dtype");
    std::vector<T> out(static_cast<size_t>(element_count()));
    size_t size = 0;
    detail::check(accel_tensor_to_data(get(), out.data(), out.size() * sizeof(T), &size));
    return out;
  }
  std::vector<int64_t> shape() const {
    std::vector<int64_t> s(ACCEL_MAX_DIMS);
    size_t n = 0;
    detail::check(accel_tensor_shape(get(), s.data(), s.size(), &n));
    s.resize(n);
    return s;
  }
  accel_dtype dtype() const { return detail::query<accel_dtype>(accel_tensor_dtype, get()); }
  int64_t element_count() const {
    return detail::query<int64_t>(accel_tensor_element_count, get());
  }
  double item() const { return detail::query<double>(accel_tensor_item_f64, get()); }
  int64_t item_i64() const { return detail::query<int64_t>(accel_tensor_item_i64, get()); }
  /** PyTorch's requires_grad_ (an autograd leaf only). */
  Tensor& set_requires_grad(bool on) {
    detail::check(accel_tensor_set_requires_grad(get(), on));
    return *this;
  }

#ifdef ACCEL_WITH_TORCH
  /** The same tensor, no copy (a new reference to its storage and autograd history). */
  Tensor(const ::torch::Tensor& t) {  // NOLINT(google-explicit-constructor): interop is the point
    check_torch();
    accel_tensor* h = nullptr;
    detail::check(accel_tensor_wrap_torch(const_cast<::torch::Tensor*>(&t), &h));
    h_ = detail::Handle<accel_tensor, accel_tensor_free>(h);
  }
  /** The LibTorch tensor inside, no copy. */
  ::torch::Tensor torch() const {
    check_torch();
    void* p = nullptr;
    detail::check(accel_tensor_borrow_torch(get(), &p));
    return *static_cast<::torch::Tensor*>(p);
  }
#endif

  accel_tensor* get() const {
    return h_.get();
  }
  explicit operator bool() const {
    return static_cast<bool>(h_);
  }

 private:
  detail::Handle<accel_tensor, accel_tensor_free> h_;
  bool owns_ = true;
};

/**
 * One tensor given to a call that takes several (Model::call, Dataset::from_tensors): an
 * accel::Tensor, lent as it is, or, with ACCEL_WITH_TORCH, a torch::Tensor, wrapped without a
 * copy; so `model.call("forward", {x, y})` takes either kind, named or not.
 */
class TensorArg {
 public:
  TensorArg(const Tensor& t) : p_(&t) {}  // NOLINT(google-explicit-constructor): the point
#ifdef ACCEL_WITH_TORCH
  TensorArg(const ::torch::Tensor& t) : owned_(t), p_(&owned_) {}  // NOLINT
#endif
  TensorArg(const TensorArg&) = delete;
  TensorArg& operator=(const TensorArg&) = delete;
  const accel_tensor* get() const {
    return p_->get();
  }

 private:
  Tensor owned_;
  const Tensor* p_;
};

/** Configuration: Accelerate's keys and YAML files (accel.h, "Configuration"). */
class Config {
 public:
  Config() {
    accel_config* c = nullptr;
    detail::check(accel_config_new(&c));
    h_ = Handle(c);
  }
  Config& set(const std::string& key, const std::string& value) {
    detail::check(accel_config_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  Config& load_file(const std::string& path) {
    detail::check(accel_config_load_file(get(), path.c_str()));
    return *this;
  }
  /** A key's value, as the configuration resolved it. */
  std::string value(const std::string& key) const {
    return detail::text([&](char* b, size_t c, size_t* n) {
      return accel_config_get(get(), key.c_str(), b, c, n);
    });
  }
  [[deprecated("accel::Config::get(key) is value(key) (get() alone is the handle)")]] std::string
  get(const std::string& key) const {
    return value(key);
  }
  std::string dump() const {
    return detail::text(
        [&](char* b, size_t c, size_t* n) { return accel_config_dump(get(), b, c, n); });
  }
  accel_config* get() const { return h_.get(); }

 private:
  using Handle = detail::Handle<accel_config, accel_config_free>;
  Handle h_;
};

class Accelerator;

/**
 * The opened host forward of a model (accel_model_forward_begin); the destructor closes it. Keep it
 * on the stack of the thread that runs the forward.
 */
class ForwardScope {
 public:
  explicit ForwardScope(accel_model* m) : m_(m) { detail::check(accel_model_forward_begin(m_)); }
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;
  ~ForwardScope() { accel_model_forward_end(m_); }

 private:
  accel_model* m_;
};

/** A model: TorchScript, layers from the catalogue, or the host's own tensors. */
class Model {
 public:
  /** An empty model, to add layers, methods or the host's tensors to. */
  Model() {
    accel_model* m = nullptr;
    detail::check(accel_model_new(&m));
    h_ = Handle(m);
  }
  /**
   * A model whose layers are built without their weights (accel_model_new_empty, Accelerate's
   * init_empty_weights), filled by load_pretrained or load_checkpoint.
   */
  static Model new_empty(bool include_buffers = false) {
    accel_model* m = nullptr;
    detail::check(accel_model_new_empty(include_buffers, &m));
    return Model(m);
  }
  static Model load_torchscript(const std::string& path) {
    accel_model* m = nullptr;
    detail::check(accel_model_load_torchscript(path.c_str(), &m));
    return Model(m);
  }
  Model& add_layer(const std::string& name, const std::string& kind, const std::string& spec) {
    detail::check(accel_model_add_layer(get(), name.c_str(), kind.c_str(), spec.c_str()));
    return *this;
  }
  /** add_layer("fc", LinearOptions{.in_features = 8, .out_features = 4}). */
  template <class L, detail::if_options<L, detail::OptionObject::layer> = 0>
  Model& add_layer(const std::string& name, const L& layer) {
    std::string spec;
    for (const auto& [key, value] : layer.pairs())
      spec += (spec.empty() ? "" : " ") + std::string(key) + "=" + value;
    return add_layer(name, L::kind, spec);
  }
  Model& define(const std::string& source) {
    detail::check(accel_model_define(get(), source.c_str()));
    return *this;
  }
  /** Lends the host's tensor as parameter `name` (accel_model_add_parameter). */
  Model& add_parameter(const std::string& name, const Tensor& t) {
    detail::check(accel_model_add_parameter(get(), name.c_str(), t.get()));
    return *this;
  }
  /** Lends the host's tensor as buffer `name` (accel_model_add_buffer). */
  Model& add_buffer(const std::string& name, const Tensor& t) {
    detail::check(accel_model_add_buffer(get(), name.c_str(), t.get()));
    return *this;
  }
  /**
   * Runs `method` on the tensors given (accel::Tensor or torch::Tensor: `call("forward", {x, y})`);
   * its tensors come back in order.
   */
  std::vector<Tensor> call(const std::string& method, std::initializer_list<TensorArg> inputs) {
    std::vector<const accel_tensor*> in;
    for (const TensorArg& t : inputs) in.push_back(t.get());
    return call_handles(method, in);
  }
  /** Runs `method` on a batch as a dataloader gives it (`call("training_step", *batch)`). */
  std::vector<Tensor> call(const std::string& method, const std::vector<Tensor>& inputs) {
    std::vector<const accel_tensor*> in;
    for (const Tensor& t : inputs) in.push_back(t.get());
    return call_handles(method, in);
  }
  [[deprecated("pass the tensors themselves: call(method, {x, y}) or call(method, batch)")]] std::
      vector<Tensor>
      call(const std::string& method, const std::vector<const Tensor*>& inputs) {
    std::vector<const accel_tensor*> in;
    for (const Tensor* t : inputs) in.push_back(t->get());
    return call_handles(method, in);
  }
  /** Runs `method` on tensor handles (the C interface's own). */
  std::vector<Tensor> call_handles(const std::string& method,
                                   const std::vector<const accel_tensor*>& in) {
    accel_tensor_list* list = nullptr;
    detail::check(accel_model_call(get(), method.c_str(), in.data(), in.size(), &list));
    detail::Handle<accel_tensor_list, accel_tensor_list_free> owned(list);
    size_t n = 0;
    detail::check(accel_tensor_list_count(list, &n));
    std::vector<Tensor> out;
    for (size_t i = 0; i < n; ++i) {
      accel_tensor* t = nullptr;
      detail::check(accel_tensor_list_get(list, i, &t));
      out.emplace_back(t);
    }
    return out;
  }
  [[deprecated("pass the tensors themselves: call(method, {x, y})")]] std::vector<Tensor> call(
      const std::string& method, std::initializer_list<const Tensor*> inputs) {
    std::vector<const accel_tensor*> in;
    for (const Tensor* t : inputs) in.push_back(t->get());
    return call_handles(method, in);
  }
  /**
   * Opens the host's forward (rank 0's buffers, the accelerator's autocast) until the returned
   * scope is destroyed: `{ auto scope = model.forward_scope(); auto out = module->forward(x); }`.
   */
  [[nodiscard]] ForwardScope forward_scope() { return ForwardScope(get()); }
  [[deprecated(
      "model.forward() is forward_scope(): a scope, not "
      "Module::forward")]] [[nodiscard]] ForwardScope
  forward() {
    return forward_scope();
  }
  Model& train(bool on = true) {
    detail::check(accel_model_train(get(), on));
    return *this;
  }
  Model& eval() { return train(false); }
  int64_t parameter_element_count() const {
    return detail::query<int64_t>(accel_model_parameter_element_count, get());
  }
  /** Parameter then buffer names, in the order accel_model_tensor_name gives. */
  std::vector<std::string> tensor_names() const {
    size_t n = 0;
    detail::check(accel_model_tensor_count(get(), &n));
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i)
      out.push_back(detail::text([&](char* b, size_t c, size_t* s) {
        return accel_model_tensor_name(get(), i, b, c, s);
      }));
    return out;
  }
  /** A detached copy of parameter or buffer `name`. */
  Tensor tensor(const std::string& name) const {
    accel_tensor* t = nullptr;
    detail::check(accel_model_tensor(get(), name.c_str(), &t));
    return Tensor(t);
  }
  void save_torchscript(const std::string& path) const {
    detail::check(accel_model_save_torchscript(get(), path.c_str()));
  }
  /** What load_pretrained did: the names transformers reports, and its messages. */
  struct LoadReport {
    std::vector<std::string> missing, unexpected, mismatched;
    std::string warnings;  // transformers' WARNING messages (text() with INFO ones too)
    std::string text;
  };
  /** A pretrained checkpoint loaded as transformers does (accel.h: accel_load_pretrained);
   *  options as "strict=false base_model_prefix=bert". */
  LoadReport load_pretrained(const std::string& path, const std::string& options = "") {
    accel_load_report* raw = nullptr;
    detail::check(accel_load_pretrained(get(), path.c_str(), options.c_str(), &raw));
    return read_report(raw);
  }
  /** The checkpoint's names mapped first (accel.h: accel_load_pretrained_mapped), as
   *  transformers' key_mapping: `map` returns the model's name for a checkpoint tensor, or
   *  std::nullopt to leave it unused. What `map` throws stops the load, the model unchanged, and
   *  is rethrown here (an empty name or one holding a NUL: std::invalid_argument); a name longer
   *  than 4095 bytes (ACCEL_ERR_CALLBACK) or two tensors given one name is an Error. */
  using NameMap = std::function<std::optional<std::string>(std::string_view)>;
  LoadReport load_pretrained(const std::string& path, const std::string& options,
                             const NameMap& map) {
    struct Call {
      const NameMap& map;
      std::exception_ptr error;
      static int32_t run(const char* name, char* out, size_t capacity, void* data) noexcept {
        auto* c = static_cast<Call*>(data);
        try {
          const std::optional<std::string> mapped = c->map(name);
          const std::string text = mapped ? *mapped : std::string();
          if (mapped && mapped->empty())
            throw std::invalid_argument(std::string("the name map gave checkpoint tensor '") +
                                        name + "' an empty name (std::nullopt leaves it unused)");
          if (text.find('\0') != std::string::npos)
            throw std::invalid_argument(std::string("the name map's name for '") + name +
                                        "' holds a NUL byte");
          // A name that does not fit is copied without its NUL: the library names it.
          const size_t n = std::min(text.size() + 1, capacity);
          std::copy(text.c_str(), text.c_str() + n, out);
          return 0;
        } catch (...) {
          c->error = std::current_exception();
          return -1;
        }
      }
    } call{map, nullptr};
    accel_load_report* raw = nullptr;
    const accel_status status = accel_load_pretrained_mapped(
        get(), path.c_str(), options.c_str(), map ? Call::run : nullptr, &call, &raw);
    if (call.error) std::rethrow_exception(call.error);
    detail::check(status);
    return read_report(raw);
  }
  /** Accelerate's load_checkpoint_in_model. */
  void load_checkpoint(const std::string& path) {
    detail::check(accel_load_checkpoint_in_model(get(), path.c_str()));
  }
  /** Accelerate's infer_auto_device_map (accel.h: accel_infer_device_map): "module=cpu|disk"
   *  lines; options as "max_memory=cpu:200MB,disk no_split_module_classes=Block". */
  std::vector<std::string> infer_device_map(const std::string& options) const {
    accel_bytes_list* list = nullptr;
    detail::check(accel_infer_device_map(get(), options.c_str(), &list));
    return detail::take_bytes_list(list);
  }
  /** Accelerate's dispatch_model with disk offload (accel.h: accel_dispatch_model): the map's
   *  lines (or infer_device_map's options); inference only afterwards. */
  void dispatch(const std::string& checkpoint, const std::string& device_map) {
    detail::check(accel_dispatch_model(get(), checkpoint.c_str(), device_map.c_str()));
  }

#ifdef ACCEL_WITH_TORCH
  /**
   * A model of `module`'s own parameters and buffers (named_parameters(), named_buffers(), with
   * their dotted names), no copy: training changes the module's tensors in place. The module's
   * forward stays the host's; run it inside forward(). A frozen parameter (requires_grad off) is
   * lent as a buffer: saved and loaded by its name, copied from rank 0, never stepped. An undefined
   * buffer (an optional one left empty) is skipped, as torch.nn does. A module emptied with
   * accel::to_meta is lent empty: load_pretrained or load_checkpoint then fills the module's own
   * tensors in place, so its forward uses the loaded weights.
   */
  static Model from_module(::torch::nn::Module& module) {
    return lend_module(module);
  }
  /** As from_module(Module&), the model keeping the module alive. */
  static Model from_module(const std::shared_ptr<::torch::nn::Module>& module) {
    if (!module) throw Error(ACCEL_ERR_INVALID_ARGUMENT, "accel: from_module of a null module");
    Model m = lend_module(*module);
    m.keep_alive_ = module;
    return m;
  }
  /** A LibTorch module holder (torch::nn::Linear, a TORCH_MODULE of the program's own). */
  template <class M>
  static Model from_module(const ::torch::nn::ModuleHolder<M>& holder) {
    return from_module(std::static_pointer_cast<::torch::nn::Module>(holder.ptr()));
  }
#endif

  accel_model* get() const {
    return h_.get();
  }

 private:
  using Handle = detail::Handle<accel_model, accel_model_free>;
  explicit Model(accel_model* m) : h_(m) {}
#ifdef ACCEL_WITH_TORCH
  static Model lend_module(::torch::nn::Module& module) {
    check_torch();
    Model m;
    for (const auto& p : module.named_parameters(/*recurse=*/true))
      if (p.value().requires_grad())
        m.add_parameter(p.key(), Tensor(p.value()));
      else
        m.add_buffer(p.key(), Tensor(p.value()));
    for (const auto& b : module.named_buffers(/*recurse=*/true))
      if (b.value().defined()) m.add_buffer(b.key(), Tensor(b.value()));
    return m;
  }
#endif
  static LoadReport read_report(accel_load_report* raw) {
    detail::Handle<accel_load_report, accel_load_report_free> report(raw);
    LoadReport out;
    auto keys = [&](const char* kind) {
      accel_bytes_list* list = nullptr;
      detail::check(accel_load_report_keys(report.get(), kind, &list));
      return detail::take_bytes_list(list);
    };
    out.missing = keys("missing");
    out.unexpected = keys("unexpected");
    out.mismatched = keys("mismatched");
    for (const bool warnings_only : {true, false})
      (warnings_only ? out.warnings : out.text) = detail::text([&](char* b, size_t c, size_t* n) {
        return accel_load_report_text(report.get(), warnings_only, b, c, n);
      });
    return out;
  }
  Handle h_;
  std::shared_ptr<const void> keep_alive_;  // a module lent by shared_ptr or holder
};

/** An optimizer over a model's parameters: sgd, adam, adamw, rmsprop, adagrad. */
class Optimizer {
 public:
  Optimizer(Model& model, const std::string& kind) {
    accel_optimizer* o = nullptr;
    detail::check(accel_optimizer_new(model.get(), kind.c_str(), &o));
    h_ = Handle(o);
  }
#ifdef ACCEL_WITH_TORCH
  /**
   * The program's own LibTorch optimizer over the model's lent tensors, stepped as it is
   * (accel_optimizer_from_torch): `Optimizer(model, std::make_shared<torch::optim::SGD>(
   * net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)))`. ZeRO refuses it.
   */
  Optimizer(Model& model, std::shared_ptr<::torch::optim::Optimizer> program) {
    check_torch();
    accel_optimizer* o = nullptr;
    detail::check(accel_optimizer_from_torch(model.get(), &program, &o));
    h_ = Handle(o);
  }
#endif
  /** An optimizer of the options' kind: Optimizer(model, AdamWOptions{.lr = 5e-3}). */
  template <class O, detail::if_options<O, detail::OptionObject::optimizer> = 0>
  Optimizer(Model& model, const O& options) : Optimizer(model, O::kind) {
    set(options);
  }
  Optimizer& set(const std::string& key, const std::string& value) {
    detail::check(accel_optimizer_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  /** Sets the options given (those of another kind are ACCEL_ERR_INVALID_ARGUMENT). */
  template <class O, detail::if_options<O, detail::OptionObject::optimizer> = 0>
  Optimizer& set(const O& options) {
    for (const auto& [key, value] : options.pairs()) set(key, value);
    return *this;
  }
  void step() {
    detail::check(accel_optimizer_step(get()));
  }
  void zero_grad() {
    detail::check(accel_optimizer_zero_grad(get()));
  }
  double lr() const {
    return detail::query<double>(accel_optimizer_lr, get());
  }
  void set_lr(double lr) {
    detail::check(accel_optimizer_set_lr(get(), lr));
  }
  bool step_was_skipped() const {
    return detail::query<bool>(accel_optimizer_step_was_skipped, get());
  }
  /** A parameter group of the parameters `names` (accel_optimizer_add_group): its index. */
  size_t add_group(const std::vector<std::string>& names) {
    std::vector<const char*> c_names;
    for (const auto& n : names) c_names.push_back(n.c_str());
    size_t group = 0;
    detail::check(accel_optimizer_add_group(get(), c_names.data(), c_names.size(), &group));
    return group;
  }
  size_t group_count() const {
    return detail::query<size_t>(accel_optimizer_group_count, get());
  }
  /** An option of one parameter group (accel_optimizer_set_group). */
  Optimizer& set_group(size_t group, const std::string& key, const std::string& value) {
    detail::check(accel_optimizer_set_group(get(), group, key.c_str(), value.c_str()));
    return *this;
  }
  double group_lr(size_t group) const {
    double lr = 0;
    detail::check(accel_optimizer_group_lr(get(), group, &lr));
    return lr;
  }
  accel_optimizer* get() const {
    return h_.get();
  }

 private:
  using Handle = detail::Handle<accel_optimizer, accel_optimizer_free>;
  Handle h_;
};

/** A learning-rate schedule driving an optimizer (accel_scheduler_new lists the kinds). */
class Scheduler {
 public:
  Scheduler(Optimizer& optimizer, const std::string& kind) {
    accel_scheduler* s = nullptr;
    detail::check(accel_scheduler_new(optimizer.get(), kind.c_str(), &s));
    h_ = Handle(s);
  }
  /** A schedule of the options' kind: Scheduler(opt, LinearSchedule{.total_steps = 1000}). */
  template <class S, detail::if_options<S, detail::OptionObject::schedule> = 0>
  Scheduler(Optimizer& optimizer, const S& schedule) : Scheduler(optimizer, S::kind) {
    for (const auto& [key, value] : schedule.pairs()) set(key, value);
  }
  Scheduler& set(const std::string& key, const std::string& value) {
    detail::check(accel_scheduler_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  void step() { detail::check(accel_scheduler_step(get())); }
  double lr() const { return detail::query<double>(accel_scheduler_lr, get()); }
  accel_scheduler* get() const { return h_.get(); }

 private:
  using Handle = detail::Handle<accel_scheduler, accel_scheduler_free>;
  Handle h_;
};

/** A field of a dataset made by callbacks: a dtype and a per-sample shape. */
struct Field {
  accel_dtype dtype;
  std::vector<int64_t> dims;
  /** A field whose first dimension varies per sample (tokens): `rest` are the fixed ones. */
  static Field ragged(accel_dtype dtype, std::vector<int64_t> rest = {}) {
    rest.insert(rest.begin(), ACCEL_RAGGED);
    return Field{dtype, std::move(rest)};
  }
};

/** One sample a stream produces: each field's bytes (a ragged field any number of rows). */
class Sample {
 public:
  template <class T>
  Sample& set(size_t field, const std::vector<T>& values) {
    return set_bytes(field, values.data(), values.size() * sizeof(T));
  }
  template <class T>
  Sample& set(size_t field, const T& value) {
    static_assert(std::is_arithmetic_v<T>, "a scalar field takes a number");
    return set_bytes(field, &value, sizeof value);
  }
  Sample& set_bytes(size_t field, const void* data, size_t size) {
    const auto* b = static_cast<const unsigned char*>(data);
    if (fields_.size() <= field) fields_.resize(field + 1);
    fields_[field].assign(b, b + size);
    return *this;
  }
  const std::vector<std::vector<unsigned char>>& fields() const { return fields_; }

 private:
  std::vector<std::vector<unsigned char>> fields_;
};

namespace detail {

// What a callback dataset's C callbacks reach: the program's functions, and the message of an
// exception one of them threw (no exception crosses the C ABI; DataLoader::next reports it).
struct CallbackSource {
  std::function<void(int64_t, int64_t*)> lengths;
  std::function<void(int64_t, void* const*, const size_t*)> fill;
  std::function<std::optional<Sample>(int64_t, int64_t)> next;
  size_t fields = 0;
  template <class F>
  int32_t guarded(F&& f) noexcept {
    return run_callback(f, [this](const char* message) { set_error(message); });
  }
  void set_error(std::string message) {
    std::lock_guard<std::mutex> lock(mutex);
    last_error = std::move(message);
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex);
    return last_error;
  }
  std::mutex mutex;  // callbacks may fail on several worker threads at once
  std::string last_error;
  static void release(void* self) { delete static_cast<CallbackSource*>(self); }
  static int32_t on_lengths(int64_t index, int64_t* lengths, size_t, void* self) {
    auto* s = static_cast<CallbackSource*>(self);
    return s->guarded([&] { s->lengths(index, lengths); });
  }
  static int32_t on_fill(int64_t index, void* const* buffers, const size_t* sizes, size_t,
                         void* self) {
    auto* s = static_cast<CallbackSource*>(self);
    return s->guarded([&] { s->fill(index, buffers, sizes); });
  }
  static int32_t on_next(int64_t epoch, int64_t position, accel_sample* sample, void* self) {
    auto* s = static_cast<CallbackSource*>(self);
    bool ended = false;
    const int32_t rc = s->guarded([&] {
      std::optional<Sample> got = s->next(epoch, position);
      if (!got) {
        ended = true;
        return;
      }
      const auto& f = got->fields();
      for (size_t i = 0; i < f.size(); ++i)
        check(accel_sample_set_field(sample, i, f[i].data(), f[i].size()));
    });
    return ended ? 1 : rc;
  }
};

inline void field_arrays(const std::vector<Field>& fields, std::vector<accel_dtype>& dtypes,
                         std::vector<size_t>& counts, std::vector<int64_t>& dims) {
  for (const auto& f : fields) {
    dtypes.push_back(f.dtype);
    counts.push_back(f.dims.size());
    dims.insert(dims.end(), f.dims.begin(), f.dims.end());
  }
}

}  // namespace detail

/** A dataset: tensors whose first dimension indexes samples, IDX files (MNIST's format), the
 *  program's functions, or a stream. */
class Dataset {
 public:
  /** The fields given (accel::Tensor or torch::Tensor: `from_tensors({images, labels})`). */
  static Dataset from_tensors(std::initializer_list<TensorArg> fields) {
    std::vector<const accel_tensor*> in;
    for (const TensorArg& t : fields) in.push_back(t.get());
    return from_handles(in);
  }
  static Dataset from_tensors(const std::vector<Tensor>& fields) {
    std::vector<const accel_tensor*> in;
    for (const Tensor& t : fields) in.push_back(t.get());
    return from_handles(in);
  }
  [[deprecated("pass the tensors themselves: from_tensors({x, y})")]] static Dataset from_tensors(
      const std::vector<const Tensor*>& fields) {
    std::vector<const accel_tensor*> in;
    for (const Tensor* t : fields) in.push_back(t->get());
    return from_handles(in);
  }
  static Dataset from_handles(const std::vector<const accel_tensor*>& in) {
    accel_dataset* d = nullptr;
    detail::check(accel_dataset_from_tensors(in.data(), in.size(), &d));
    return Dataset(d);
  }
  static Dataset from_idx(const std::vector<std::string>& paths) {
    std::vector<const char*> in;
    for (const auto& p : paths) in.push_back(p.c_str());
    accel_dataset* d = nullptr;
    detail::check(accel_dataset_from_idx(in.data(), in.size(), &d));
    return Dataset(d);
  }
  /**
   * `count` samples with ragged fields (Field::ragged): `lengths(index, lengths)` writes each
   * ragged field's length, then `fill(index, buffers, sizes)` fills `sizes[f]` bytes of each field.
   * Both may run on the dataloader's worker threads at once. An exception they throw fails the
   * batch (Error with ACCEL_ERR_CALLBACK and its message).
   */
  static Dataset from_ragged(int64_t count, const std::vector<Field>& fields,
                             std::function<void(int64_t, int64_t*)> lengths,
                             std::function<void(int64_t, void* const*, const size_t*)> fill) {
    auto source = std::make_unique<detail::CallbackSource>();
    source->lengths = std::move(lengths);
    source->fill = std::move(fill);
    std::vector<accel_dtype> dtypes;
    std::vector<size_t> counts;
    std::vector<int64_t> dims;
    detail::field_arrays(fields, dtypes, counts, dims);
    accel_dataset* d = nullptr;
    detail::CallbackSource* raw = source.get();
    detail::check(accel_dataset_from_ragged_callback(
        count, fields.size(), dtypes.data(), counts.data(), dims.data(),
        detail::CallbackSource::on_lengths, detail::CallbackSource::on_fill, raw,
        detail::CallbackSource::release, &d));
    source.release();  // the dataset releases it
    return Dataset(d, raw);
  }
  /**
   * A stream: `next(epoch, position)` returns sample `position` (0, 1, ... in order; 0 starts the
   * stream again), or std::nullopt at its end. Never called on two threads at once.
   */
  static Dataset from_stream(const std::vector<Field>& fields,
                             std::function<std::optional<Sample>(int64_t, int64_t)> next) {
    auto source = std::make_unique<detail::CallbackSource>();
    source->next = std::move(next);
    std::vector<accel_dtype> dtypes;
    std::vector<size_t> counts;
    std::vector<int64_t> dims;
    detail::field_arrays(fields, dtypes, counts, dims);
    accel_dataset* d = nullptr;
    detail::CallbackSource* raw = source.get();
    detail::check(accel_dataset_from_stream(fields.size(), dtypes.data(), counts.data(),
                                            dims.data(), detail::CallbackSource::on_next, raw,
                                            detail::CallbackSource::release, &d));
    source.release();
    return Dataset(d, raw);
  }
  /** A stream of the lines of a text file (one ragged uint8 field). */
  static Dataset from_text_lines(const std::string& path) {
    accel_dataset* d = nullptr;
    detail::check(accel_dataset_from_text_lines(path.c_str(), &d));
    return Dataset(d);
  }
  /** -1 for a stream. */
  int64_t sample_count() const { return detail::query<int64_t>(accel_dataset_sample_count, get()); }
  size_t field_count() const { return detail::query<size_t>(accel_dataset_field_count, get()); }
  accel_dataset* get() const { return h_.get(); }
  // The program's callbacks, when it has some (their last exception's message); null otherwise.
  detail::CallbackSource* source() const { return source_; }

 private:
  explicit Dataset(accel_dataset* d, detail::CallbackSource* source = nullptr)
      : h_(d), source_(source) {}
  detail::Handle<accel_dataset, accel_dataset_free> h_;
  detail::CallbackSource* source_ = nullptr;
};

/** A dataloader for this process (accel.h lists its options). */
class DataLoader {
 public:
  DataLoader(const Accelerator& accelerator, Dataset& dataset);
  /** DataLoader(acc, dataset, DataLoaderOptions{.batch_size = 64, .shuffle = true}). */
  DataLoader(const Accelerator& accelerator, Dataset& dataset, const DataLoaderOptions& options)
      : DataLoader(accelerator, dataset) {
    set(options);
  }
  DataLoader& set(const std::string& key, const std::string& value) {
    detail::check(accel_dataloader_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  /** Sets the options given (the padding ones for every ragged field). */
  DataLoader& set(const DataLoaderOptions& options) {
    for (const auto& [key, value] : options.pairs()) set(key, value);
    return *this;
  }
  /** A padding option of one ragged field (accel.h: pad_value, padding_side, max_length, ...). */
  DataLoader& set_field(size_t field, const std::string& key, const std::string& value) {
    detail::check(accel_dataloader_set_field(get(), field, key.c_str(), value.c_str()));
    return *this;
  }
  /** The next batch, one tensor per field; std::nullopt at the end of an epoch. */
  std::optional<std::vector<Tensor>> next() {
    std::vector<accel_tensor*> fields(ACCEL_MAX_DIMS);
    size_t n = 0;
    accel_status st = accel_dataloader_next(get(), fields.data(), fields.size(), &n);
    if (st == ACCEL_ERR_BUFFER_TOO_SMALL) {
      fields.resize(n);
      st = accel_dataloader_next(get(), fields.data(), fields.size(), &n);
    }
    if (st == ACCEL_ERR_CALLBACK && source_ && !source_->error().empty())
      throw Error(st, std::string(accel_last_error_message()) + ": " + source_->error());
    detail::check(st);
    if (n == 0) return std::nullopt;
    std::vector<Tensor> out;
    for (size_t i = 0; i < n; ++i) out.emplace_back(fields[i]);
    return out;
  }
  void set_epoch(int64_t epoch) { detail::check(accel_dataloader_set_epoch(get(), epoch)); }
  int64_t batch_count() const {
    return detail::query<int64_t>(accel_dataloader_batch_count, get());
  }
  size_t field_count() const { return detail::query<size_t>(accel_dataloader_field_count, get()); }
  int64_t epoch() const { return detail::query<int64_t>(accel_dataloader_epoch, get()); }
  /** True while the last batch of the epoch is in use (Accelerate's end_of_dataloader). */
  bool end_of_epoch() const { return detail::query<bool>(accel_dataloader_end_of_epoch, get()); }
  /** Accelerate's remainder: the real samples of the last global step (accel.h: a stream's is -1
   *  until its last global batch is in use). */
  int64_t remainder() const { return detail::query<int64_t>(accel_dataloader_remainder, get()); }
  /** The next iteration skips this process's first `n` batches: a mid-epoch resume. */
  void skip_first_batches(int64_t n) {
    detail::check(accel_dataloader_skip_first_batches(get(), n));
  }
  /** The global sample cursor: the epoch, and the samples of it all processes consumed. */
  std::pair<int64_t, int64_t> position() const {
    int64_t epoch = 0, samples = 0;
    detail::check(accel_dataloader_position(get(), &epoch, &samples));
    return {epoch, samples};
  }
  void set_position(int64_t epoch, int64_t samples) {
    detail::check(accel_dataloader_set_position(get(), epoch, samples));
  }
  /** Stops the worker threads and releases the dataset (accel.h, accel_dataloader_close). */
  void close() { detail::check(accel_dataloader_close(get())); }
  accel_dataloader* get() const { return h_.get(); }

 private:
  detail::Handle<accel_dataloader, accel_dataloader_free> h_;
  detail::CallbackSource* source_ = nullptr;  // the dataset's, which this loader keeps alive
};

/** Accelerate's Accelerator: the process's place in the job, collectives, prepare, the step. */
/** Named values to log (accel.h, "Trackers"): numbers and texts, in the order first set. */
class Values {
 public:
  struct Entry {
    std::string key;
    bool is_text = false;
    double number = 0;
    std::string text;
  };
  Values() {
    accel_values* v = nullptr;
    detail::check(accel_values_new(&v));
    h_ = detail::Handle<accel_values, accel_values_free>(v);
  }
  Values(std::initializer_list<std::pair<const char*, double>> numbers) : Values() {
    for (const auto& [key, number] : numbers) set(key, number);
  }
  Values& set(const std::string& key, double number) {
    detail::check(accel_values_set_number(get(), key.c_str(), number));
    return *this;
  }
  Values& set(const std::string& key, const std::string& text) {
    detail::check(accel_values_set_text(get(), key.c_str(), text.c_str()));
    return *this;
  }
  Values& set(const std::string& key, const char* text) { return set(key, std::string(text)); }
  size_t size() const { return detail::query<size_t>(accel_values_count, get()); }
  std::vector<Entry> entries() const { return entries_of(get()); }
  accel_values* get() const { return h_.get(); }

  /** The entries of values the library lends (a custom tracker's arguments). */
  static std::vector<Entry> entries_of(const accel_values* values) {
    std::vector<Entry> out;
    if (!values) return out;
    size_t n = 0;
    detail::check(accel_values_count(values, &n));
    for (size_t i = 0; i < n; ++i) {
      const char *key = nullptr, *text = nullptr;
      int32_t is_text = 0;
      double number = 0;
      detail::check(accel_values_get(values, i, &key, &is_text, &number, &text));
      out.push_back(Entry{key, is_text != 0, number, text ? text : ""});
    }
    return out;
  }

 private:
  detail::Handle<accel_values, accel_values_free> h_;
};

/** A tracker of the program's own (accel_add_tracker): an exception it throws fails the call
 *  that reached it with ACCEL_ERR_CALLBACK and its message. */
class Tracker {
 public:
  virtual ~Tracker() = default;
  virtual void start(const std::string& /*project*/, const std::vector<Values::Entry>& /*config*/) {
  }
  /** `step` is -1 for a value logged without one. */
  virtual void log(const std::vector<Values::Entry>& values, int64_t step) = 0;
  virtual void finish() {}
};

namespace detail {

// What a custom tracker's C callbacks reach: the program's tracker and the message of the last
// exception it threw (no exception crosses the C ABI; the Accelerator's call rethrows it).
struct TrackerHolder {
  std::unique_ptr<Tracker> tracker;
  std::string error;
  template <class F>
  static int32_t guarded(void* self, F&& f) noexcept {
    auto* h = static_cast<TrackerHolder*>(self);
    return run_callback([&] { f(*h->tracker); }, [h](const char* message) { h->error = message; });
  }
  static int32_t on_start(const char* project, const accel_values* config, void* self) {
    return guarded(self, [&](Tracker& t) { t.start(project, Values::entries_of(config)); });
  }
  static int32_t on_log(const accel_values* values, int64_t step, void* self) {
    return guarded(self, [&](Tracker& t) { t.log(Values::entries_of(values), step); });
  }
  static int32_t on_finish(void* self) {
    return guarded(self, [&](Tracker& t) { t.finish(); });
  }
  static void release(void* self) { delete static_cast<TrackerHolder*>(self); }
};

}  // namespace detail

/** How Accelerator::log_message writes (Accelerate's main_process_only and in_order; accel.h,
 *  "Logging"). in_order, with main_process_only false, makes the call a collective. */
struct LogOptions {
  bool main_process_only = true;
  bool in_order = false;
};

/** Where the accelerator's messages go: level, the writing rank, the flags, the message. An
 *  exception it throws fails the log call with ACCEL_ERR_CALLBACK and its message. */
using LogSink = std::function<void(accel_log_level level, int32_t rank, accel_log_flags flags,
                                   const std::string& message)>;

namespace detail {

// What the C sink reaches: the program's function and the message of the last exception it threw.
struct LogSinkHolder {
  LogSink sink;
  std::string error;
  static int32_t call(accel_log_level level, int32_t rank, accel_log_flags flags,
                      const char* message, void* self) noexcept {
    auto* h = static_cast<LogSinkHolder*>(self);
    return run_callback([&] { h->sink(level, rank, flags, message); },
                        [h](const char* error) { h->error = error; });
  }
  static void release(void* self) { delete static_cast<LogSinkHolder*>(self); }
};

}  // namespace detail

class Accelerator {
 public:
  /** From the environment and the launcher (accel_init with no configuration). */
  Accelerator() { init(nullptr); }
  explicit Accelerator(const Config& config) { init(config.get()); }

  int32_t process_index() const { return detail::query<int32_t>(accel_process_index, get()); }
  int32_t local_process_index() const {
    return detail::query<int32_t>(accel_local_process_index, get());
  }
  int32_t num_processes() const { return detail::query<int32_t>(accel_num_processes, get()); }
  bool is_main_process() const { return detail::query<bool>(accel_is_main_process, get()); }
  bool is_local_main_process() const {
    return detail::query<bool>(accel_is_local_main_process, get());
  }
  std::string device() const {
    return detail::text([&](char* b, size_t c, size_t* n) { return accel_device(get(), b, c, n); });
  }
#ifdef ACCEL_WITH_TORCH
  /** The device as LibTorch's: `tensor.to(acc.torch_device())`. */
  ::torch::Device torch_device() const {
    return ::torch::Device(device());
  }
#endif
  /** ACCEL_PRECISION_NO, _BF16 or _FP16. */
  accel_precision mixed_precision() const {
    return detail::query<accel_precision>(accel_mixed_precision, get());
  }
  /** An ACCEL_DISTRIBUTED_* value. */
  accel_distribution distributed_type() const {
    return detail::query<accel_distribution>(accel_distributed_type, get());
  }
  /** The configuration this accelerator was created with, as Config::dump writes it. */
  std::string effective_config() const {
    return detail::text(
        [&](char* b, size_t c, size_t* n) { return accel_effective_config(get(), b, c, n); });
  }
  /**
   * Accelerate's main_process_first around `block` (a collective): the main process runs it
   * first, the others after. The end runs also when `block` throws (which then goes on).
   */
  template <class F>
  auto main_process_first(F&& block) -> decltype(block()) {
    return scoped(accel_main_process_first_begin, accel_main_process_first_end, block);
  }
  /** Accelerate's local_main_process_first: as main_process_first, one machine at a time. */
  template <class F>
  auto local_main_process_first(F&& block) -> decltype(block()) {
    return scoped(accel_local_main_process_first_begin, accel_local_main_process_first_end, block);
  }
  /** Whether this is the last process (Accelerate's is_last_process). */
  bool is_last_process() const {
    return detail::query<bool>(accel_is_last_process, get());
  }
  /** Accelerate's on_main_process, on_local_main_process, on_last_process and on_process(i):
   *  `f` runs on that process only (no collective). */
  template <class F>
  void on_main_process(F&& f) {
    if (is_main_process()) f();
  }
  template <class F>
  void on_local_main_process(F&& f) {
    if (is_local_main_process()) f();
  }
  template <class F>
  void on_last_process(F&& f) {
    if (is_last_process()) f();
  }
  template <class F>
  void on_process(int32_t process_index, F&& f) {
    if (this->process_index() == process_index) f();
  }
  /** Accelerate's no_sync(model) around `block`: backward keeps the model's gradients local. */
  template <class F>
  auto no_sync(Model& model, F&& block) -> decltype(block()) {
    accel_model* m = model.get();
    return scoped([m](accel_accelerator* a) { return accel_no_sync_begin(a, m); },
                  [m](accel_accelerator* a) { return accel_no_sync_end(a, m); }, block);
  }
  /**
   * Accelerate's find_executable_batch_size: `fn(batch_size)` from `starting_batch_size` down,
   * again at int(size * 0.9) when it ran out of memory (an accel::Error with
   * ACCEL_ERR_OUT_OF_MEMORY, std::bad_alloc, or an exception whose message is LibTorch's
   * "out of memory"); returns the size that ran. Every rank agrees (accel.h).
   */
  template <class F>
  int64_t find_executable_batch_size(F&& fn, int64_t starting_batch_size = 128) {
    struct Call {
      F& fn;
      std::exception_ptr error;
      static accel_status run(void* data, int64_t size) noexcept {
        auto* c = static_cast<Call*>(data);
        try {
          c->fn(size);
          return ACCEL_OK;
        } catch (...) {
          if (detail::handling_out_of_memory()) return ACCEL_ERR_OUT_OF_MEMORY;
          c->error = std::current_exception();
        }
        return ACCEL_ERR_CALLBACK;
      }
    } call{fn, nullptr};
    int64_t size = 0;
    const accel_status status =
        accel_find_executable_batch_size(get(), starting_batch_size, Call::run, &call, &size);
    if (call.error) std::rethrow_exception(call.error);
    detail::check(status);
    return size;
  }

  void wait_for_everyone() {
    detail::check(accel_wait_for_everyone(get()));
  }
  /**
   * Makes this process's waiting calls (collectives, a dataloader waiting for its workers, the
   * Trainer between steps) throw ACCEL_ERR_CANCELLED until cleared; from any thread (accel.h,
   * accel_set_interrupted: an interrupted collective leaves the process group unusable).
   */
  void set_interrupted(bool interrupted) {
    detail::check(accel_set_interrupted(get(), interrupted ? 1 : 0));
  }
  /** Prints on the main process only. */
  void print(const std::string& message) const {
    detail::check(accel_print(get(), message.c_str()));
  }
  /**
   * Seeds LibTorch's generators, libaccel's (data shuffling) and rng(), as Accelerate seeds
   * Python's `random` and numpy beside torch; `device_specific` adds the process index.
   */
  void set_seed(uint64_t seed, bool device_specific = false) {
    detail::check(accel_set_seed(get(), seed, device_specific));
    rng_.seed(seed + (device_specific ? static_cast<uint64_t>(process_index()) : 0));
  }
  /**
   * The C++ generator set_seed seeds: after it, the same draws on every rank (unless
   * device_specific) and in every run. Seeded from std::random_device until then. Not for several
   * threads at once.
   */
  std::mt19937_64& rng() noexcept {
    return rng_;
  }

  Tensor gather(const Tensor& t) {
    return collective(accel_gather, t);
  }
  Tensor gather_for_metrics(const Tensor& t) {
    return collective(accel_gather_for_metrics, t);
  }
  /** Accelerate's pad_across_processes: pads `dim` to the largest size of any rank. */
  Tensor pad_across_processes(const Tensor& t, int64_t dim = 0, double pad_value = 0,
                              bool pad_first = false) {
    accel_tensor* out = nullptr;
    detail::check(accel_pad_across_processes(get(), t.get(), dim, pad_value, pad_first, &out));
    return Tensor(out);
  }
  /** Accelerate's gather_object, for bytes: every rank's `bytes`, in rank order. */
  std::vector<std::string> gather_object(const std::string& bytes) {
    accel_bytes_list* raw = nullptr;
    detail::check(accel_gather_object(get(), bytes.data(), bytes.size(), &raw));
    return detail::take_bytes_list(raw);
  }
  Tensor reduce(const Tensor& t, accel_reduction reduction = ACCEL_REDUCE_SUM) {
    accel_tensor* out = nullptr;
    detail::check(accel_reduce(get(), t.get(), reduction, &out));
    return Tensor(out);
  }

 private:
  template <class T>
  static int64_t length_of(const std::vector<T>& v) {
    return static_cast<int64_t>(v.size());
  }
  static int64_t length_of(const Tensor& t) {
    const auto shape = t.shape();
    if (shape.empty())
      throw Error(ACCEL_ERR_SHAPE, "split_between_processes: a scalar has no rows");
    return shape[0];
  }

 public:
  /** Accelerate's split_between_processes for a list: this process's items (accel.h). */
  template <class T>
  std::vector<T> split_between_processes(const std::vector<T>& items, bool apply_padding = false) {
    size_t n = 0;
    const accel_status st = accel_split_between_processes(get(), static_cast<int64_t>(items.size()),
                                                          apply_padding, nullptr, 0, &n);
    if (st != ACCEL_ERR_BUFFER_TOO_SMALL) detail::check(st);
    std::vector<int64_t> idx(n);
    detail::check(accel_split_between_processes(get(), static_cast<int64_t>(items.size()),
                                                apply_padding, idx.data(), idx.size(), &n));
    std::vector<T> out;
    for (int64_t i : idx) out.push_back(items[static_cast<size_t>(i)]);
    return out;
  }
  /** The same for a tensor's rows. */
  Tensor split_between_processes(const Tensor& t, bool apply_padding = false) {
    accel_tensor* out = nullptr;
    detail::check(accel_split_tensor_between_processes(get(), t.get(), apply_padding, &out));
    return Tensor(out);
  }
  /**
   * The same for a dictionary of lists or of tensors (Accelerate's dict input): every value split
   * alike. Values of different lengths (a tensor's length is its rows) are
   * ACCEL_ERR_INVALID_ARGUMENT, as Accelerate raises ValueError.
   */
  template <class K, class V, class C, class A>
  std::map<K, V, C, A> split_between_processes(const std::map<K, V, C, A>& items,
                                               bool apply_padding = false) {
    std::map<K, V, C, A> out;
    std::optional<int64_t> length;
    for (const auto& [key, value] : items) {
      const int64_t n = length_of(value);
      if (length && *length != n)
        throw Error(ACCEL_ERR_INVALID_ARGUMENT,
                    "split_between_processes: all values in the dictionary must have the same "
                    "length (" +
                        std::to_string(*length) + " and " + std::to_string(n) + ")");
      length = n;
    }
    for (const auto& [key, value] : items)
      out.emplace(key, split_between_processes(value, apply_padding));
    return out;
  }
  /**
   * Accelerate's join_uneven_inputs around `loop` (accel.h: accel_join_uneven_inputs_begin): the
   * end runs also when `loop` throws (which then goes on). `even_batches`: -1 keeps the prepared
   * dataloaders' setting, 0 or 1 sets it inside. Returns what `loop` returns.
   */
  template <class F>
  auto join_uneven_inputs(F&& loop, int32_t even_batches = -1) -> decltype(loop()) {
    return scoped(
        [even_batches](accel_accelerator* a) {
          return accel_join_uneven_inputs_begin(a, even_batches);
        },
        accel_join_uneven_inputs_end, loop);
  }
  /** Accelerate's set_trigger (local) and check_trigger (a collective). */
  void set_trigger() {
    detail::check(accel_set_trigger(get()));
  }
  bool check_trigger() {
    return detail::query<bool>(accel_check_trigger, get());
  }

  Tensor broadcast(const Tensor& t, int32_t from_process = 0) {
    accel_tensor* out = nullptr;
    detail::check(accel_broadcast(get(), t ? t.get() : nullptr, from_process, &out));
    return Tensor(out);
  }

  /** Accelerate's prepare(*objects): models, optimizers, schedulers and dataloaders. */
  template <class... Objects>
  void prepare(Objects&... objects) {
    void* handles[] = {static_cast<void*>(objects.get())...};
    detail::check(accel_prepare(get(), handles, sizeof...(Objects)));
  }
  void accumulate() {
    detail::check(accel_accumulate(get()));
  }
  bool sync_gradients() const {
    return detail::query<bool>(accel_sync_gradients, get());
  }
  void backward(const Tensor& loss) {
    detail::check(accel_backward(get(), loss.get()));
  }
  /** The total norm before clipping. */
  double clip_grad_norm(Model& model, double max_norm, double norm_type = 2.0) {
    double norm = 0;
    detail::check(accel_clip_grad_norm(get(), model.get(), max_norm, norm_type, &norm));
    return norm;
  }
  void clip_grad_value(Model& model, double clip_value) {
    detail::check(accel_clip_grad_value(get(), model.get(), clip_value));
  }
  void save_model(const Model& model, const std::string& dir,
                  const char* max_shard_size = nullptr) {
    detail::check(accel_save_model(get(), model.get(), dir.c_str(), max_shard_size));
  }
  void save_state(const std::string& dir) {
    detail::check(accel_save_state(get(), dir.c_str()));
  }
  void load_state(const std::string& dir) {
    detail::check(accel_load_state(get(), dir.c_str()));
  }

  /** Accelerate's init_trackers, log (step -1: none) and end_training (accel.h, "Trackers"). */
  void init_trackers(const std::string& project, const Values* config = nullptr) {
    tracked(accel_init_trackers(get(), project.c_str(), config ? config->get() : nullptr));
  }
  void log(const Values& values, int64_t step = -1) {
    tracked(accel_log(get(), values.get(), step));
  }
  void end_training() {
    tracked(accel_end_training(get()));
  }
  /** Adds a tracker of the program's own, before init_trackers. */
  void add_tracker(const std::string& name, std::unique_ptr<Tracker> tracker) {
    auto holder = std::make_unique<detail::TrackerHolder>();
    holder->tracker = std::move(tracker);
    detail::check(accel_add_tracker(get(), name.c_str(), detail::TrackerHolder::on_start,
                                    detail::TrackerHolder::on_log, detail::TrackerHolder::on_finish,
                                    holder.get(), detail::TrackerHolder::release));
    trackers_.push_back(holder.release());  // the library owns it now (release)
  }

  /** Accelerate's logger.log(level, message, main_process_only=..., in_order=...): messages
   *  below log_level() are dropped; they go to standard error or the sink set. */
  void log_message(accel_log_level level, const std::string& message, LogOptions options = {}) {
    accel_log_flags flags = 0;
    if (!options.main_process_only) flags |= ACCEL_LOG_ALL_PROCESSES;
    if (options.in_order) flags |= ACCEL_LOG_IN_ORDER;
    const accel_status status = accel_log_message(get(), level, flags, message.c_str());
    if (status == ACCEL_ERR_CALLBACK && log_sink_ && !log_sink_->error.empty())
      throw Error(status,
                  accel_last_error_message() + (": " + std::exchange(log_sink_->error, {})));
    detail::check(status);
  }
  void debug(const std::string& message, LogOptions o = {}) {
    log_message(ACCEL_LOG_DEBUG, message, o);
  }
  void info(const std::string& message, LogOptions o = {}) {
    log_message(ACCEL_LOG_INFO, message, o);
  }
  void warning(const std::string& message, LogOptions o = {}) {
    log_message(ACCEL_LOG_WARNING, message, o);
  }
  void error(const std::string& message, LogOptions o = {}) {
    log_message(ACCEL_LOG_ERROR, message, o);
  }
  void critical(const std::string& message, LogOptions o = {}) {
    log_message(ACCEL_LOG_CRITICAL, message, o);
  }
  accel_log_level log_level() const {
    return detail::query<accel_log_level>(accel_get_log_level, get());
  }
  void set_log_level(accel_log_level level) {
    detail::check(accel_set_log_level(get(), level));
  }
  /** Sends messages to `sink` (an empty function: standard error again). */
  void set_log_sink(LogSink sink) {
    std::unique_ptr<detail::LogSinkHolder> holder;
    if (sink) holder.reset(new detail::LogSinkHolder{std::move(sink), {}});
    detail::check(accel_set_log_sink(get(), holder ? detail::LogSinkHolder::call : nullptr,
                                     holder.get(), detail::LogSinkHolder::release));
    log_sink_ = holder.release();  // the library owns it now; the one replaced is released
  }

  accel_accelerator* get() const {
    return h_.get();
  }

 private:
  // A custom tracker's failure carries the exception's message.
  void tracked(accel_status status) {
    if (status != ACCEL_ERR_CALLBACK) return detail::check(status);
    std::string message = accel_last_error_message();
    for (auto* h : trackers_)
      if (!h->error.empty()) message += ": " + std::exchange(h->error, std::string());
    throw Error(status, message);
  }
  // begin(a); block(); end(a): the end also runs when `block` throws (whose exception then wins).
  template <class Begin, class End, class F>
  auto scoped(Begin begin, End end_fn, F& block) -> decltype(block()) {
    detail::check(begin(get()));
    struct Guard {
      accel_accelerator* a;
      End& end_fn;
      bool done = false;
      ~Guard() {
        if (!done) end_fn(a);  // unwinding: the block's exception wins
      }
    } guard{get(), end_fn};
    if constexpr (std::is_void_v<decltype(block())>) {
      block();
      guard.done = true;
      detail::check(end_fn(get()));
    } else {
      auto result = block();
      guard.done = true;
      detail::check(end_fn(get()));
      return result;
    }
  }
  void init(const accel_config* config) {
    accel_accelerator* a = nullptr;
    detail::check(accel_init(config, &a));
    h_ = detail::Handle<accel_accelerator, accel_accelerator_free>(a);
  }
  template <class F>
  Tensor collective(F fn, const Tensor& t) {
    accel_tensor* out = nullptr;
    detail::check(fn(get(), t.get(), &out));
    return Tensor(out);
  }
  detail::Handle<accel_accelerator, accel_accelerator_free> h_;
  std::vector<detail::TrackerHolder*> trackers_;  // owned by the library until it releases them
  detail::LogSinkHolder* log_sink_ = nullptr;     // the same
  std::mt19937_64 rng_{std::random_device{}()};
};

/**
 * Accelerate's LocalSGD (accel.h: accel_local_sgd_begin): the model's gradients stay local and
 * every `local_sgd_steps`-th step() averages its parameters. end() averages once more when needed;
 * a LocalSgd destroyed without end() stops without averaging. Options (set): outer_optimizer
 * (none, nesterov: DiLoCo), outer_lr, outer_momentum.
 */
class LocalSgd {
 public:
  LocalSgd(Accelerator& accelerator, Model& model, int64_t local_sgd_steps) {
    accel_local_sgd* l = nullptr;
    detail::check(accel_local_sgd_begin(accelerator.get(), model.get(), local_sgd_steps, &l));
    h_ = Handle(l);
  }
  LocalSgd& set(const std::string& key, const std::string& value) {
    detail::check(accel_local_sgd_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  void step() { detail::check(accel_local_sgd_step(get())); }
  void end() { detail::check(accel_local_sgd_end(get())); }
  int64_t average_count() const {
    return detail::query<int64_t>(accel_local_sgd_average_count, get());
  }
  accel_local_sgd* get() const { return h_.get(); }

 private:
  using Handle = detail::Handle<accel_local_sgd, accel_local_sgd_free>;
  Handle h_;
};

/**
 * Accelerate's profile(ProfileKwargs(...)) (accel.h: accel_profiler_new): set options, start(),
 * step() at the start of each step, stop() at the end (the trace files, a collective with an
 * output_trace_dir). on_trace_ready's function is called with this profiler each time a window is
 * complete; an exception it throws comes out of the step() or stop() that completed the window.
 */
class Profiler {
 public:
  explicit Profiler(Accelerator& accelerator) {
    accel_profiler* p = nullptr;
    detail::check(accel_profiler_new(accelerator.get(), &p));
    h_ = Handle(p);
  }
  Profiler(const Profiler&) = delete;  // the trace-ready function holds its address
  Profiler& operator=(const Profiler&) = delete;
  Profiler& set(const std::string& key, const std::string& value) {
    detail::check(accel_profiler_set(get(), key.c_str(), value.c_str()));
    return *this;
  }
  Profiler& on_trace_ready(std::function<void(Profiler&)> fn) {
    ready_ = std::make_unique<Ready>(Ready{std::move(fn), this, nullptr});
    detail::check(accel_profiler_set_on_trace_ready(get(), ready_->fn ? &Ready::call : nullptr,
                                                    ready_.get()));
    return *this;
  }
  void start() { checked(accel_profiler_start(get())); }
  void step() { checked(accel_profiler_step(get())); }
  void stop() { checked(accel_profiler_stop(get())); }
  /** The last complete window's summary table (sort_by: cpu_time_total, self_cpu_time_total,
   *  count, name; row_limit -1: every row). */
  std::string table(const std::string& sort_by = "cpu_time_total", int64_t row_limit = -1) const {
    return detail::text([&](char* b, size_t c, size_t* n) {
      return accel_profiler_table(get(), sort_by.c_str(), row_limit, b, c, n);
    });
  }
  void export_chrome_trace(const std::string& path) const {
    detail::check(accel_profiler_export_chrome_trace(get(), path.c_str()));
  }
  int64_t window_count() const {
    return detail::query<int64_t>(accel_profiler_window_count, get());
  }
  accel_profiler* get() const { return h_.get(); }

 private:
  struct Ready {
    std::function<void(Profiler&)> fn;
    Profiler* self;
    std::exception_ptr error;
    static accel_status call(void* data, accel_profiler*) noexcept {
      auto* r = static_cast<Ready*>(data);
      try {
        r->fn(*r->self);
        return ACCEL_OK;
      } catch (...) {
        r->error = std::current_exception();
        return ACCEL_ERR_CALLBACK;
      }
    }
  };
  void checked(accel_status status) {
    if (ready_ && ready_->error) std::rethrow_exception(std::exchange(ready_->error, nullptr));
    detail::check(status);
  }
  using Handle = detail::Handle<accel_profiler, accel_profiler_free>;
  std::unique_ptr<Ready> ready_;  // outlives the handle (declared first, destroyed last)
  Handle h_;
};

inline DataLoader::DataLoader(const Accelerator& accelerator, Dataset& dataset)
    : source_(dataset.source()) {
  accel_dataloader* l = nullptr;
  detail::check(accel_dataloader_new(accelerator.get(), dataset.get(), &l));
  h_ = detail::Handle<accel_dataloader, accel_dataloader_free>(l);
}

/**
 * Hugging Face's BERT WordPiece tokenizer (accel.h, "Tokenizers"): the ids tokenizers 0.19.1
 * gives, [CLS] and [SEP] included. Immutable: share one across threads freely.
 */
class Tokenizer {
 public:
  /** tokenizer.json, vocab.txt or a model directory (accel_tokenizer_load). */
  static Tokenizer load(const std::string& path) {
    accel_tokenizer* t = nullptr;
    detail::check(accel_tokenizer_load(path.c_str(), &t));
    Tokenizer out;
    out.h_ = Handle(t);
    return out;
  }
  /** The ids of `text`; max_length counts [CLS] and [SEP], 0 is no truncation. */
  std::vector<int64_t> encode(const std::string& text, size_t max_length = 0) const {
    std::vector<int64_t> ids(64);
    size_t n = 0;
    accel_status s =
        accel_tokenizer_encode(get(), text.c_str(), max_length, ids.data(), ids.size(), &n);
    if (s == ACCEL_ERR_BUFFER_TOO_SMALL) {
      ids.resize(n);
      s = accel_tokenizer_encode(get(), text.c_str(), max_length, ids.data(), ids.size(), &n);
    }
    detail::check(s);
    ids.resize(n);
    return ids;
  }
  /** input_ids and attention_mask, int64 [texts, longest], padded on the right with [PAD]. */
  std::pair<Tensor, Tensor> encode_batch(const std::vector<std::string>& texts,
                                         size_t max_length = 0) const {
    std::vector<const char*> raw;
    raw.reserve(texts.size());
    for (const auto& t : texts) raw.push_back(t.c_str());
    accel_tensor *ids = nullptr, *mask = nullptr;
    detail::check(
        accel_tokenizer_encode_batch(get(), raw.data(), raw.size(), max_length, &ids, &mask));
    return {Tensor(ids), Tensor(mask)};
  }
  /** The id of `token` ("[CLS]"); throws Error(ACCEL_ERR_INVALID_ARGUMENT) for none. */
  int64_t token_id(const std::string& token) const {
    int64_t id = 0;
    detail::check(accel_tokenizer_token_id(get(), token.c_str(), &id));
    return id;
  }
  size_t vocab_size() const { return detail::query<size_t>(accel_tokenizer_vocab_size, get()); }
  accel_tokenizer* get() const { return h_.get(); }

 private:
  using Handle = detail::Handle<accel_tokenizer, accel_tokenizer_free>;
  Handle h_;
};

/** transformers' TrainerCallback events (accel.h, "Trainer"). */
enum class TrainerEvent : int32_t {
  init_end = ACCEL_TRAINER_ON_INIT_END,
  train_begin = ACCEL_TRAINER_ON_TRAIN_BEGIN,
  epoch_begin = ACCEL_TRAINER_ON_EPOCH_BEGIN,
  step_begin = ACCEL_TRAINER_ON_STEP_BEGIN,
  substep_end = ACCEL_TRAINER_ON_SUBSTEP_END,
  pre_optimizer_step = ACCEL_TRAINER_ON_PRE_OPTIMIZER_STEP,
  optimizer_step = ACCEL_TRAINER_ON_OPTIMIZER_STEP,
  step_end = ACCEL_TRAINER_ON_STEP_END,
  log = ACCEL_TRAINER_ON_LOG,
  evaluate = ACCEL_TRAINER_ON_EVALUATE,
  save = ACCEL_TRAINER_ON_SAVE,
  epoch_end = ACCEL_TRAINER_ON_EPOCH_END,
  train_end = ACCEL_TRAINER_ON_TRAIN_END,
  predict = ACCEL_TRAINER_ON_PREDICT,
  prediction_step = ACCEL_TRAINER_ON_PREDICTION_STEP,
};

/** transformers' name of an event ("on_step_end"). */
inline std::string event_name(TrainerEvent e) {
  const char* name = accel_trainer_event_name(static_cast<accel_trainer_event>(e));
  return name ? name : "";
}

/** Metrics and logs by name. */
using Metrics = std::map<std::string, double>;

/** What a Trainer callback reads and changes: the state and the control flags. */
class TrainerContext {
 public:
  explicit TrainerContext(accel_trainer* t) : t_(t) {}
  int64_t global_step() const { return detail::query<int64_t>(accel_trainer_global_step, t_); }
  double epoch() const { return detail::query<double>(accel_trainer_epoch, t_); }
  /** The state as transformers' trainer_state.json. */
  std::string state_json() const {
    return detail::text(
        [&](char* b, size_t c, size_t* n) { return accel_trainer_state_json(t_, b, c, n); });
  }
  /** A TrainerControl flag: should_training_stop, should_epoch_stop, should_save, ... */
  bool control(const std::string& flag) const {
    bool v = false;
    detail::check(accel_trainer_control(t_, flag.c_str(), &v));
    return v;
  }
  void set_control(const std::string& flag, bool value) {
    detail::check(accel_trainer_set_control(t_, flag.c_str(), value));
  }

 private:
  accel_trainer* t_;
};

/** An evaluation step's result; an empty Tensor gives none. */
struct EvalOutput {
  Tensor loss, predictions, labels;
};

/** Trainer::predict's result: every sample once, in dataset order. */
struct Prediction {
  Tensor predictions, labels;
  Metrics metrics;
};

/**
 * transformers' Trainer over the accelerator (accel.h, "Trainer"): the training loop, logging,
 * evaluation, prediction, checkpoints, the best model, early stopping and exact resume. The steps
 * and callbacks are std::functions; an exception one throws stops the call that reached it and is
 * rethrown from there as it was. Free (destroy) it before its accelerator.
 */
class Trainer {
 public:
  /** Called at every event with the context, the event and its values (logs or metrics; null for
   *  the events without). */
  using Callback = std::function<void(TrainerContext&, TrainerEvent, const Metrics*)>;
  using TrainingStep = std::function<Tensor(const std::vector<Tensor>& batch)>;
  using EvalStep = std::function<EvalOutput(const std::vector<Tensor>& batch)>;
  using ComputeMetrics = std::function<Metrics(const Tensor& predictions, const Tensor& labels)>;

  /** `settings`: TrainingArguments' names as key=value text (accel.h). Prepares what is not. */
  Trainer(Accelerator& accelerator, Model& model, Optimizer& optimizer, Scheduler* scheduler,
          DataLoader& train, DataLoader* eval = nullptr, const std::string& settings = "");

  /** The batch's tensors are lent for the call; return the loss (a scalar with its graph). */
  Trainer& set_training_step(TrainingStep step) {
    auto* box = new Box<TrainingStep>{std::move(step), state_};
    detail::check(accel_trainer_set_training_step(get(), &Trainer::run_training_step, box,
                                                  &Box<TrainingStep>::release));
    return *this;
  }
  Trainer& set_eval_step(EvalStep step) {
    auto* box = new Box<EvalStep>{std::move(step), state_};
    detail::check(
        accel_trainer_set_eval_step(get(), &Trainer::run_eval_step, box, &Box<EvalStep>::release));
    return *this;
  }
  Trainer& set_compute_metrics(ComputeMetrics fn) {
    auto* box = new Box<ComputeMetrics>{std::move(fn), state_};
    detail::check(accel_trainer_set_compute_metrics(get(), &Trainer::run_compute_metrics, box,
                                                    &Box<ComputeMetrics>::release));
    return *this;
  }
  Trainer& add_callback(Callback callback) {
    auto* box = new Box<Callback>{std::move(callback), state_};
    detail::check(accel_trainer_add_callback(get(), &Trainer::run_callback_box, box,
                                             &Box<Callback>::release));
    return *this;
  }

  void train() {
    call([&] { return accel_trainer_train(get()); });
  }
  Metrics evaluate() {
    accel_values* raw = nullptr;
    call([&] { return accel_trainer_evaluate(get(), &raw); });
    return take_metrics(raw);
  }
  Prediction predict(DataLoader& loader);

  int64_t global_step() const { return TrainerContext(get()).global_step(); }
  double epoch() const { return TrainerContext(get()).epoch(); }
  std::string state_json() const { return TrainerContext(get()).state_json(); }
  accel_trainer* get() const { return h_.get(); }

 private:
  // What the callbacks share with the call that reached them: the first exception thrown.
  struct State {
    std::exception_ptr error;
  };
  template <class F>
  struct Box {
    F fn;
    std::shared_ptr<State> state;
    static void release(void* self) { delete static_cast<Box*>(self); }
    // 0, or -1 with the exception kept for the call that reached the callback; running out of
    // memory is ACCEL_ERR_OUT_OF_MEMORY itself, which auto_find_batch_size retries smaller (the
    // call's Error then carries the status).
    template <class G>
    int32_t guard(G&& g) noexcept {
      try {
        g();
        return 0;
      } catch (...) {
        if (detail::handling_out_of_memory()) return ACCEL_ERR_OUT_OF_MEMORY;
        if (!state->error) state->error = std::current_exception();
      }
      return -1;
    }
  };
  static std::vector<Tensor> lent(const accel_tensor* const* batch, size_t count) {
    std::vector<Tensor> out;
    for (size_t i = 0; i < count; ++i) out.push_back(Tensor::borrowed(batch[i]));
    return out;
  }
  static int32_t run_training_step(const accel_tensor* const* batch, size_t count,
                                   accel_tensor** out_loss, void* self) {
    auto* box = static_cast<Box<TrainingStep>*>(self);
    return box->guard([&] { *out_loss = box->fn(lent(batch, count)).release(); });
  }
  static int32_t run_eval_step(const accel_tensor* const* batch, size_t count,
                               accel_tensor** out_loss, accel_tensor** out_predictions,
                               accel_tensor** out_labels, void* self) {
    auto* box = static_cast<Box<EvalStep>*>(self);
    return box->guard([&] {
      EvalOutput out = box->fn(lent(batch, count));
      *out_loss = out.loss.release();
      *out_predictions = out.predictions.release();
      *out_labels = out.labels.release();
    });
  }
  static int32_t run_compute_metrics(const accel_tensor* predictions, const accel_tensor* labels,
                                     accel_values* metrics, void* self) {
    auto* box = static_cast<Box<ComputeMetrics>*>(self);
    return box->guard([&] {
      const Tensor p = Tensor::borrowed(predictions), l = Tensor::borrowed(labels);
      for (const auto& [key, value] : box->fn(p, l))
        detail::check(accel_values_set_number(metrics, key.c_str(), value));
    });
  }
  static int32_t run_callback_box(accel_trainer* t, accel_trainer_event event,
                                  const accel_values* values, void* self) {
    auto* box = static_cast<Box<Callback>*>(self);
    return box->guard([&] {
      TrainerContext ctx(t);
      std::optional<Metrics> m;
      if (values) {
        m.emplace();
        for (const auto& e : Values::entries_of(values))
          if (!e.is_text) (*m)[e.key] = e.number;
      }
      box->fn(ctx, static_cast<TrainerEvent>(event), m ? &*m : nullptr);
    });
  }
  static Metrics take_metrics(accel_values* raw) {
    detail::Handle<accel_values, accel_values_free> owned(raw);
    Metrics out;
    for (const auto& e : Values::entries_of(raw))
      if (!e.is_text) out[e.key] = e.number;
    return out;
  }
  // Runs a C call that may reach the callbacks; their exception wins over the status it caused.
  template <class F>
  void call(F&& f) {
    state_->error = nullptr;
    const accel_status status = f();
    if (state_->error) std::rethrow_exception(std::exchange(state_->error, nullptr));
    detail::check(status);
  }

  std::shared_ptr<State> state_ = std::make_shared<State>();
  detail::Handle<accel_trainer, accel_trainer_free> h_;
};

inline Trainer::Trainer(Accelerator& accelerator, Model& model, Optimizer& optimizer,
                        Scheduler* scheduler, DataLoader& train, DataLoader* eval,
                        const std::string& settings) {
  accel_trainer* t = nullptr;
  detail::check(accel_trainer_new(accelerator.get(), model.get(), optimizer.get(),
                                  scheduler ? scheduler->get() : nullptr, train.get(),
                                  eval ? eval->get() : nullptr, settings.c_str(), &t));
  h_ = detail::Handle<accel_trainer, accel_trainer_free>(t);
}

inline Prediction Trainer::predict(DataLoader& loader) {
  accel_tensor *predictions = nullptr, *labels = nullptr;
  accel_values* metrics = nullptr;
  call([&] { return accel_trainer_predict(get(), loader.get(), &predictions, &labels, &metrics); });
  Prediction p;
  p.predictions = Tensor(predictions);
  p.labels = Tensor(labels);
  p.metrics = take_metrics(metrics);
  return p;
}

}  // namespace accel

#endif  // ACCEL_ACCEL_HPP
