#include "model/host_tensors.hpp"

#include <c10/core/Storage.h>

#include <cctype>
#include <mutex>
#include <set>
#include <tuple>

#include "common/error.hpp"

namespace accel::model {

namespace {

// Every live HostTensors, so that a tensor lent to one model is refused by another. Guards each
// one's recorded memory ranges too (admit reads the others'). Never destroyed: a model may be
// freed after static destructors ran (a finalizer at exit).
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<const HostTensors*>& registry() {
  static auto* r = new std::set<const HostTensors*>;
  return *r;
}

std::string shape_text(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// The memory under `t`'s storage as [begin, end); empty for a storage of no bytes.
std::pair<uintptr_t, uintptr_t> memory_of(const at::Tensor& t) {
  if (!t.has_storage() || !t.storage().data()) return {0, 0};  // meta tensors have no memory
  const auto begin = reinterpret_cast<uintptr_t>(t.storage().data());
  return {begin, begin + t.storage().nbytes()};
}

bool overlap(std::pair<uintptr_t, uintptr_t> a, std::pair<uintptr_t, uintptr_t> b) {
  return a.first < a.second && b.first < b.second && a.first < b.second && b.first < a.second;
}

}  // namespace

std::vector<std::string> split_tensor_name(const std::string& name) {
  std::vector<std::string> parts(1);
  for (char c : name) {
    if (c == '.') {
      parts.emplace_back();
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      parts.back() += c;
    } else {
      fail(Errc::invalid_argument, "tensor name '" + name +
                                       "': use dot-separated segments of letters, digits and '_' "
                                       "(\"fc1.weight\", \"layers.0.bias\")");
    }
  }
  for (const auto& p : parts)
    if (p.empty()) fail(Errc::invalid_argument, "tensor name '" + name + "' has an empty segment");
  return parts;
}

HostTensors::HostTensors() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().insert(this);
}

HostTensors::~HostTensors() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(this);
  entries_.clear();
}

void HostTensors::admit(const std::string& name, const at::Tensor& t, bool is_parameter,
                        const std::vector<std::pair<std::string, at::Tensor>>& existing) {
  const std::string what = (is_parameter ? "parameter '" : "buffer '") + name + "'";
  if (!t.defined()) fail(Errc::invalid_argument, what + " is an undefined tensor");
  if (t.layout() != at::kStrided || !t.has_storage())
    fail(Errc::invalid_argument, what + " is not a dense (strided) tensor");
  if (is_parameter) {
    if (!at::isFloatingType(t.scalar_type()))
      fail(Errc::invalid_argument,
           what + " is " + std::string(c10::toString(t.scalar_type())) +
               ": a trained parameter is floating point (an integer tensor is a buffer)");
    if (!t.requires_grad())
      fail(Errc::invalid_argument,
           what +
               " does not require grad: set requires_grad on it, or lend a tensor that is not "
               "trained as a buffer (accel_model_add_buffer)");
    if (!t.is_leaf())
      fail(Errc::invalid_argument,
           what +
               " is not an autograd leaf (it was computed from other tensors): a parameter is a "
               "leaf, as torch.nn.Parameter; lend the tensor it came from, or a detached copy "
               "with requires_grad set");
  } else if (t.requires_grad()) {
    fail(Errc::invalid_argument,
         what +
             " requires grad: a tensor that is trained is a parameter (accel_model_add_parameter)");
  }
  // An empty (meta) tensor has no device of its own yet: a load fills it on the CPU.
  if (!t.is_meta())
    for (const auto& [other_name, other] : existing) {
      if (other.is_meta()) continue;
      if (other.device() != t.device())
        fail(Errc::invalid_argument, what + " is on " + t.device().str() + " but '" + other_name +
                                         "' is on " + other.device().str() +
                                         ": a model's tensors are on one device");
      break;
    }
  const auto memory = memory_of(t);
  for (const auto& [other_name, other] : existing)
    if (overlap(memory, memory_of(other)))
      fail(Errc::invalid_argument,
           what + " shares its storage with '" + other_name +
               "' of this model (the same tensor, a view of it, or tied weights): each "
               "parameter and buffer owns its storage");
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const HostTensors* h : registry()) {
    if (h == this) continue;
    for (const auto& e : h->entries_)
      if (overlap(memory, {e.begin, e.end}))
        fail(Errc::invalid_argument, what + " shares its storage with '" + e.name +
                                         "' of another model: a tensor is lent to one model only");
  }
  entries_.push_back(Entry{name, t, memory.first, memory.second, nullptr, {}});
}

void HostTensors::forget_last() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!entries_.empty()) entries_.pop_back();
}

void HostTensors::pin() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (auto& e : entries_) {
    std::tie(e.begin, e.end) = memory_of(e.tensor);
    e.data = e.tensor.data_ptr();
    e.sizes = e.tensor.sizes().vec();
  }
  pinned_ = true;
}

void HostTensors::check() const {
  if (!pinned_) return;
  for (const auto& e : entries_) {
    const bool same_shape = e.tensor.sizes() == at::IntArrayRef(e.sizes);
    if (same_shape && e.tensor.data_ptr() == e.data) continue;
    fail(Errc::state, "the host changed '" + e.name + "' while its model is prepared (" +
                          (same_shape ? std::string("its storage was replaced")
                                      : "resized from " + shape_text(e.sizes) + " to " +
                                            shape_text(e.tensor.sizes())) +
                          "): a prepared model's tensors keep their shape and storage; the "
                          "optimizer and the gradient buckets point into them");
  }
}

}  // namespace accel::model
