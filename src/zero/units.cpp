#include "zero/units.hpp"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/error.hpp"

namespace accel::zero {

namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kEnter = c10::Symbol::fromQualString("accel::unit_enter");
const c10::Symbol kExit = c10::Symbol::fromQualString("accel::unit_exit");

// The module tree in pre-order (a module before its children); entry 0 is the root.
struct Tree {
  struct Entry {
    std::string name;
    torch::jit::Module module;
    int parent;
    std::vector<int> children;
  };
  std::vector<Entry> entries;

  explicit Tree(const torch::jit::Module& root) { add(root, "", -1); }

 private:
  void add(const torch::jit::Module& m, const std::string& name, int parent) {
    const int me = static_cast<int>(entries.size());
    entries.push_back({name, m, parent, {}});
    if (parent >= 0) entries[static_cast<size_t>(parent)].children.push_back(me);
    for (const auto& child : m.named_children())
      add(child.value, name.empty() ? child.name : name + "." + child.name, me);
  }
};

const c10::ClassType* module_class(const Value* v) {
  const auto c = v->type()->cast<c10::ClassType>();
  return c && c->is_module() ? c.get() : nullptr;
}

bool returns_one_tensor(const Node* call) {
  return call->outputs().size() == 1 &&
         call->output()->type()->isSubtypeOf(*c10::TensorType::get());
}

// Every method of every class in the tree, once.
std::vector<torch::jit::GraphFunction*> methods_of(const Tree& tree) {
  std::vector<torch::jit::GraphFunction*> out;
  std::unordered_set<const torch::jit::Function*> seen;
  for (const auto& e : tree.entries)
    for (torch::jit::Function* f : e.module.type()->methods())
      if (seen.insert(f).second)
        if (auto* g = torch::jit::tryToGraphFunction(*f)) out.push_back(g);
  return out;
}

// What the graphs say about how each module class is used from outside its own methods.
struct Usage {
  std::set<const c10::ClassType*> foreign_params;  // a parameter read by another module's method
  std::set<const c10::ClassType*> not_one_tensor;  // a method called that returns something else
  bool opaque_calls = false;  // a call through an interface or a module container's index
};

void scan(const Block* b, const Value* self, Usage& u) {
  for (const Node* n : b->nodes()) {
    for (const Block* sub : n->blocks()) scan(sub, self, u);
    if (n->kind() == c10::prim::ModuleContainerIndex) {
      u.opaque_calls = true;
    } else if (n->kind() == c10::prim::CallMethod && n->input(0) != self) {
      const c10::ClassType* c = module_class(n->input(0));
      if (!c && n->input(0)->type()->cast<c10::InterfaceType>()) u.opaque_calls = true;
      if (c && !returns_one_tensor(n)) u.not_one_tensor.insert(c);
    } else if (n->kind() == c10::prim::GetAttr && n->input(0) != self) {
      const c10::ClassType* c = module_class(n->input(0));
      if (!c) continue;
      const auto slot = c->findAttributeSlot(n->s(c10::attr::name));
      if (slot && c->is_parameter(*slot)) u.foreign_params.insert(c);
    }
  }
}

// Why entry i cannot be a unit ("" when it can), given which entries are units.
std::string unfit(const Tree& tree, const Usage& usage, const std::vector<bool>& unit, int i) {
  if (usage.opaque_calls)
    return "the model calls submodules through an interface or a module list's index, which "
           "cannot be followed";
  if (usage.not_one_tensor.count(tree.entries[static_cast<size_t>(i)].module.type().get()))
    return "a method of its class returns something other than one tensor";
  // Its own modules: itself and the descendants no other unit holds.
  std::vector<int> todo{i};
  while (!todo.empty()) {
    const auto& e = tree.entries[static_cast<size_t>(todo.back())];
    todo.pop_back();
    if (usage.foreign_params.count(e.module.type().get()))
      return "a parameter of " + (e.name.empty() ? std::string("the root") : "'" + e.name + "'") +
             " is read outside that module's own methods (tied weights?)";
    for (int c : e.children)
      if (!unit[static_cast<size_t>(c)]) todo.push_back(c);
  }
  return "";
}

std::string class_name(const torch::jit::Module& m) {
  return m.type()->name() ? m.type()->name()->name() : "?";
}

// The policy's choice, before checking that each can be a unit.
std::vector<bool> policy_units(const Tree& tree, const std::vector<int64_t>& own_numel,
                               const config::ShardingPlan& plan) {
  const size_t n = tree.entries.size();
  std::vector<bool> unit(n, false);
  if (plan.family == "DEEPSPEED") {
    // DeepSpeed's stage 3 fetches each module's own parameters before its forward.
    for (size_t i = 1; i < n; ++i) unit[i] = own_numel[i] > 0;
  } else if (plan.auto_wrap_policy == "TRANSFORMER_BASED_WRAP") {
    if (plan.wrap_classes.empty())
      fail(Errc::config,
           "fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP names no class: set "
           "fsdp_transformer_layer_cls_to_wrap (libaccel's models have no _no_split_modules to "
           "take them from)");
    std::set<std::string> found, present;
    for (size_t i = 1; i < n; ++i) {
      const std::string name = class_name(tree.entries[i].module);
      present.insert(name);
      for (const auto& wanted : plan.wrap_classes)
        if (wanted == name) {
          unit[i] = true;
          found.insert(name);
        }
    }
    for (const auto& wanted : plan.wrap_classes)
      if (!found.count(wanted)) {
        std::string list;
        for (const auto& p : present) list += (list.empty() ? "" : ", ") + p;
        fail(Errc::config, "Could not find the transformer layer class '" + wanted +
                               "' in the model (fsdp_transformer_layer_cls_to_wrap); its "
                               "submodules' classes are: " +
                               (list.empty() ? "none" : list));
      }
  } else if (plan.auto_wrap_policy == "SIZE_BASED_WRAP" && plan.min_num_params > 0) {
    // FSDP's size_based_auto_wrap_policy: bottom-up, a module whose parameters not already in a
    // unit below it number at least min_num_params becomes one.
    std::vector<int64_t> remaining(own_numel);
    for (size_t i = n; i-- > 1;) {
      unit[i] = remaining[i] >= plan.min_num_params;
      const int parent = tree.entries[i].parent;
      if (!unit[i]) remaining[static_cast<size_t>(parent)] += remaining[i];
    }
  }
  return unit;
}

}  // namespace

UnitPlan choose_units(const torch::jit::Module& root, const std::vector<at::Tensor>& params,
                      const config::ShardingPlan& plan) {
  const Tree tree(root);
  const size_t n = tree.entries.size();
  Usage usage;
  for (auto* f : methods_of(tree)) scan(f->graph()->block(), f->graph()->inputs().at(0), usage);

  std::unordered_map<const void*, size_t> index;
  for (size_t k = 0; k < params.size(); ++k) index.emplace(params[k].unsafeGetTensorImpl(), k);
  std::vector<int> module_of(params.size(), 0);
  std::vector<bool> placed(params.size(), false);
  std::vector<int64_t> own_numel(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (const auto& p : tree.entries[i].module.named_parameters(/*recurse=*/false)) {
      const auto it = index.find(p.value.unsafeGetTensorImpl());
      if (it == index.end() || placed[it->second]) continue;
      placed[it->second] = true;
      module_of[it->second] = static_cast<int>(i);
      own_numel[i] += p.value.numel();
    }

  UnitPlan out;
  std::vector<bool> unit = policy_units(tree, own_numel, plan);
  for (size_t i = n; i-- > 1;) {  // children before parents: a refused child joins its parent
    if (!unit[i]) continue;
    const std::string why = unfit(tree, usage, unit, static_cast<int>(i));
    if (why.empty()) continue;
    unit[i] = false;
    out.notes.push_back("'" + tree.entries[i].name + "' (" + class_name(tree.entries[i].module) +
                        ") is not a unit of its own: " + why);
  }
  std::vector<int> unit_index(n, -1);
  out.units.push_back({});
  unit_index[0] = 0;
  for (size_t i = 1; i < n; ++i)
    if (unit[i]) {
      unit_index[i] = static_cast<int>(out.units.size());
      out.units.push_back({tree.entries[i].name, tree.entries[i].module._ivalue().get(), {}});
    }
  for (size_t k = 0; k < params.size(); ++k) {
    int i = module_of[k];
    while (unit_index[static_cast<size_t>(i)] < 0) i = tree.entries[static_cast<size_t>(i)].parent;
    out.units[static_cast<size_t>(unit_index[static_cast<size_t>(i)])].params.push_back(k);
  }
  return out;
}

namespace {

void rewrite(Block* b, const Value* self, const std::set<const c10::ClassType*>& classes) {
  for (auto it = b->nodes().begin(); it != b->nodes().end(); ++it) {
    Node* n = *it;
    for (Block* sub : n->blocks()) rewrite(sub, self, classes);
    if (n->kind() != c10::prim::CallMethod || n->input(0) == self) continue;
    const c10::ClassType* c = module_class(n->input(0));
    if (!c || !classes.count(c) || !returns_one_tensor(n)) continue;
    if (n->next()->kind() == kExit) continue;  // done before
    torch::jit::Graph* g = b->owningGraph();
    {
      torch::jit::WithInsertPoint before(n);
      g->insert(kEnter, {n->input(0)});
    }
    torch::jit::WithInsertPoint after(n->next());
    Value* out = g->insert(kExit, {n->input(0), n->output()});
    n->output()->replaceAllUsesAfterNodeWith(out->node(), out);
  }
}

}  // namespace

void instrument(torch::jit::Module& root, const UnitPlan& units) {
  const Tree tree(root);
  std::unordered_set<const void*> objects;
  for (const auto& u : units.units)
    if (u.object) objects.insert(u.object);
  std::set<const c10::ClassType*> classes;
  for (const auto& e : tree.entries)
    if (objects.count(e.module._ivalue().get())) classes.insert(e.module.type().get());
  if (classes.empty()) return;
  for (auto* f : methods_of(tree))
    rewrite(f->graph()->block(), f->graph()->inputs().at(0), classes);
}

}  // namespace accel::zero
