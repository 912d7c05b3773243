#include "bigmodel/model_tree.hpp"

#include <torch/script.h>

#include <unordered_map>

namespace accel::bigmodel {

namespace {

struct Ids {
  std::unordered_map<const void*, int64_t> of_storage;
  int64_t id(const at::Tensor& t) {
    const void* key = t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl())
                                      : static_cast<const void*>(t.unsafeGetTensorImpl());
    return of_storage.emplace(key, static_cast<int64_t>(of_storage.size())).first->second;
  }
};

TensorEntry entry(const std::string& name, const at::Tensor& t, Ids& ids) {
  return {name, static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()),
          ids.id(t)};
}

ModuleTree build(const torch::jit::Module& m, Ids& ids) {
  ModuleTree out;
  out.class_name = m.type()->name() ? m.type()->name()->name() : "Module";
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    out.params.push_back(entry(p.name, p.value, ids));
  for (const auto& c : m.named_children()) out.children.emplace_back(c.name, build(c.value, ids));
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    out.buffers.push_back(entry(b.name, b.value, ids));
  return out;
}

}  // namespace

ModuleTree module_tree(const torch::jit::Module& root) {
  Ids ids;
  return build(root, ids);
}

}  // namespace accel::bigmodel
