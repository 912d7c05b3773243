#include "prepare/rewind.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include "prepare/session.hpp"
#include "runtime/seed.hpp"

namespace accel::prepare {

Rewind::Rewind(Session& session) : session_(session) {
  for (at::Generator gen : {at::detail::getDefaultCPUGenerator(), runtime::library_generator()}) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    generators_.emplace_back(gen, gen.get_state());
  }
  for (const auto& m : session.models())
    for (const auto& [name, p] : m->named_parameters()) {
      const at::Tensor& g = p.grad();
      gradients_.emplace_back(p, g.defined() ? g.clone() : at::Tensor());
    }
  for (const auto& loader : session.dataloaders()) positions_.push_back(loader->position());
  micro_step_ = session.micro_step();
  total_steps_ = session.total_steps();
  sync_ = session.sync_gradients();
}

void Rewind::restore() {
  for (auto& [gen, state] : generators_) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
  c10::NoGradGuard no_grad;
  for (auto& [p, saved] : gradients_) {
    at::Tensor& g = p.mutable_grad();
    if (saved.defined() && g.defined())
      g.copy_(saved);  // in place: a gradient may be a view into a communication bucket
    else if (saved.defined())
      g = saved.clone();
    else if (g.defined() && !session_.zero_gradient_in_place(p))
      g.reset();
  }
  const auto& loaders = session_.dataloaders();
  for (size_t i = 0; i < positions_.size() && i < loaders.size(); ++i)
    loaders[i]->set_position(positions_[i].first, positions_[i].second);
  session_.restore_micro_step(micro_step_, sync_, total_steps_);
}

}  // namespace accel::prepare
