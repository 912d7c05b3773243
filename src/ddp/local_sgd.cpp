#include "ddp/local_sgd.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <utility>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "model/model.hpp"
#include "prepare/session.hpp"
#include "runtime/communicator.hpp"

namespace accel::ddp {
namespace {

std::vector<at::Tensor> parameters_of(const model::Model& m) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.detach());
  return out;
}

double real_option(const std::string& key, const std::string& value, double low, double high) {
  double v = 0;
  if (!parse_real(value, &v) || !(v >= low && v <= high))
    fail(Errc::invalid_argument, "local SGD option " + key + ": '" + value +
                                     "' is not a number in [" + format_real(low) + ", " +
                                     format_real(high) + "]");
  return v;
}

}  // namespace

LocalSgd::LocalSgd(prepare::Session& session, std::shared_ptr<model::Model> model, int64_t steps)
    : model_(std::move(model)), every_(steps) {
  if (steps < 1)
    fail(Errc::invalid_argument,
         "local_sgd_steps must be at least 1 (got " + std::to_string(steps) + ")");
  auto& acc = session.accelerator();
  if (acc.sharding().stage > 0)
    fail(Errc::unsupported, "LocalSGD averages whole parameters, but ZeRO stage " +
                                std::to_string(acc.sharding().stage) +
                                " shards them (Accelerate supports it only without DeepSpeed "
                                "and FSDP)");
  enabled_ = acc.communicator() != nullptr;
  if (enabled_ && !session.is_prepared(model_.get()))
    fail(Errc::state, "LocalSGD needs a prepared model: pass it to accel_prepare first");
  session.no_sync_begin(*model_);
}

void LocalSgd::set(const std::string& key, const std::string& value) {
  if (steps_taken_ > 0) fail(Errc::state, "local SGD options are fixed once it has stepped");
  if (key == "outer_optimizer") {
    if (value != "none" && value != "nesterov")
      fail(Errc::invalid_argument,
           "local SGD option outer_optimizer: '" + value + "' (allowed: none, nesterov)");
    outer_.enabled = value == "nesterov";
    // The outer step starts from the parameters as they are now: set it before training.
    anchor_.clear();
    momentum_.clear();
    if (outer_.enabled)
      for (const at::Tensor& p : parameters_of(*model_)) anchor_.push_back(p.clone());
  } else if (key == "outer_lr") {
    outer_.lr = real_option(key, value, 0, 1e6);
  } else if (key == "outer_momentum") {
    outer_.momentum = real_option(key, value, 0, 1);
  } else {
    fail(Errc::invalid_argument, "unknown local SGD option '" + key +
                                     "'; known: outer_optimizer, outer_lr, outer_momentum");
  }
}

void LocalSgd::step(prepare::Session& session) {
  if (ended_) fail(Errc::state, "local SGD has ended");
  ++steps_taken_;
  ++since_average_;
  if (enabled_ && steps_taken_ % every_ == 0) average(session);
}

void LocalSgd::end(prepare::Session& session) {
  if (ended_) return;
  if (enabled_ && since_average_ > 0) average(session);
  abandon(session);
}

void LocalSgd::abandon(prepare::Session& session) {
  if (ended_) return;
  ended_ = true;
  session.no_sync_end(*model_);
}

// One all-reduce per (dtype, device) of all the parameters flattened together.
void LocalSgd::average(prepare::Session& session) {
  runtime::Communicator* comm = session.accelerator().communicator();
  const std::vector<at::Tensor> params = parameters_of(*model_);
  if (outer_.enabled && anchor_.empty())
    fail(Errc::internal, "local SGD: the outer step's anchor was not taken");
  c10::NoGradGuard no_grad;
  std::map<std::pair<int, std::string>, std::vector<size_t>> groups;
  for (size_t i = 0; i < params.size(); ++i)
    groups[{static_cast<int>(params[i].scalar_type()), params[i].device().str()}].push_back(i);
  std::vector<at::Tensor> averaged(params.size());
  for (const auto& [key, members] : groups) {
    std::vector<at::Tensor> flat;
    for (size_t i : members) flat.push_back(params[i].reshape(-1));
    at::Tensor all = at::cat(flat);
    comm->all_reduce(all, runtime::ReduceOp::kSum);
    all.div_(comm->size());
    int64_t offset = 0;
    for (size_t i : members) {
      averaged[i] = all.narrow(0, offset, params[i].numel()).view(params[i].sizes());
      offset += params[i].numel();
    }
  }
  if (outer_.enabled) outer_step(params, averaged);
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(averaged[i]);
  ++averages_;
  since_average_ = 0;
}

// DiLoCo: the outer gradient is anchor - average; Nesterov momentum; the new anchor is what
// every rank continues from.
void LocalSgd::outer_step(const std::vector<at::Tensor>& params,
                          std::vector<at::Tensor>& averaged) {
  if (momentum_.empty())
    for (const at::Tensor& a : anchor_) momentum_.push_back(at::zeros_like(a));
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor delta = anchor_[i] - averaged[i];
    momentum_[i].mul_(outer_.momentum).add_(delta);
    anchor_[i].sub_(delta + momentum_[i] * outer_.momentum, outer_.lr);
    averaged[i] = anchor_[i];
  }
}

}  // namespace accel::ddp
