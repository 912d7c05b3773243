// A program's own LibTorch optimizer behind accel::optim::Optimizer: stepped as it is, over
// parameters that must be its own; its learning rates are the only options libaccel sets (for
// schedules), read and written through LibTorch's OptimizerOptions::get_lr/set_lr.
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <set>

#include "common/error.hpp"
#include "optim/optimizer.hpp"

namespace accel::optim {

namespace {

// The libaccel kind whose state functions fit the program's optimizer, or "torch" for a class of
// its own (stepped all the same, not checkpointed).
std::string kind_of(torch::optim::Optimizer& o) {
  namespace to = torch::optim;
  if (dynamic_cast<to::SGD*>(&o)) return "sgd";
  if (dynamic_cast<to::Adam*>(&o)) return "adam";
  if (dynamic_cast<to::AdamW*>(&o)) return "adamw";
  if (dynamic_cast<to::RMSprop*>(&o)) return "rmsprop";
  if (dynamic_cast<to::Adagrad*>(&o)) return "adagrad";
  return "torch";
}

// A group's rate; none when its options class does not implement get_lr (LibTorch's default
// throws).
std::optional<double> lr_of(const torch::optim::OptimizerParamGroup& g) {
  try {
    return g.options().get_lr();
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

}  // namespace

Optimizer::Optimizer(std::shared_ptr<torch::optim::Optimizer> program) : foreign_(true) {
  if (!program) fail(Errc::invalid_argument, "the program's optimizer is null");
  kind_ = kind_of(*program);
  impl_ = std::move(program);
  const auto& groups = impl_->param_groups();
  if (groups.empty()) fail(Errc::invalid_argument, "the program's optimizer has no parameters");
  for (const auto& g : groups) {
    std::map<std::string, double> options;
    if (const auto lr = lr_of(g)) options["lr"] = *lr;
    groups_.push_back(Group{{}, std::move(options), std::nullopt});
  }
  defaults_ = groups_[0].options;
  stepped_ = !impl_->state().empty();
}

void Optimizer::bind_foreign(std::vector<at::Tensor> params) {
  std::set<const void*> own;
  size_t count = 0;
  for (const auto& g : impl_->param_groups())
    for (const auto& p : g.params()) {
      own.insert(p.unsafeGetTensorImpl());
      ++count;
    }
  if (count != params.size())
    fail(Errc::invalid_argument, "the program's optimizer steps " + std::to_string(count) +
                                     " tensors, and its model has " +
                                     std::to_string(params.size()) +
                                     " trainable parameters: give it the model's parameters");
  for (size_t i = 0; i < params.size(); ++i)
    if (!own.count(params[i].unsafeGetTensorImpl()))
      fail(Errc::invalid_argument,
           "the model's trainable parameter " + std::to_string(i) +
               " is not one the program's optimizer steps (make the optimizer over the very "
               "tensors lent to the model, e.g. module->parameters())");
  params_ = std::move(params);
  owned_.assign(params_.size(), true);
  group_of_.assign(params_.size(), 0);
}

void Optimizer::apply_foreign_lrs() {
  auto& groups = impl_->param_groups();
  for (size_t g = 0; g < groups_.size() && g < groups.size(); ++g)
    if (auto it = groups_[g].options.find("lr"); it != groups_[g].options.end())
      groups[g].options().set_lr(it->second);
}

}  // namespace accel::optim
