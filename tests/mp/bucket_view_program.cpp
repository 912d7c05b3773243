// A rank of the gradients-as-bucket-views test: a torch::nn::Module lent to libaccel, trained in
// windows of two micro-steps (gradient_accumulation_steps 2) on data that depends on the rank.
// Layer "side" is used by rank 0 in each window's first (local) micro-step only, by nobody in the
// synchronising one. Every rank checks, window by window:
//   - each synchronised gradient equals the average over the ranks of both micro-steps' gradients,
//     computed here independently (within 1e-6 relative), "side" included: a gradient accumulated
//     in a local micro-step reaches the others although nobody used the parameter when it synced;
//   - the gradients stay at one address from the second window on (they are bucket views: nothing
//     reallocated, nothing copied), and zero_grad zeroes them in place;
//   - detach_() then zero_() on a gradient, as torch::optim's and tch-rs's zero_grad do, works.
// Prints "rank R: bucket views hold" when all of that held.
//   bucket_view_program
#define ACCEL_WITH_TORCH
#include <accel/accel.hpp>

#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <map>
#include <string>

namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(20, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    side = register_module("side", torch::nn::Linear(20, 4));
  }
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& y, bool use_side) {
    auto out = fc2->forward(torch::tanh(fc1->forward(x)));
    if (use_side) out = out + side->forward(x);
    return torch::cross_entropy_loss(out, y);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, side{nullptr};
};

// Rank r's batch for micro-step m of window w: a function of (w, m, r) only, so every rank can
// recompute every other rank's.
std::pair<torch::Tensor, torch::Tensor> batch_of(int window, int micro, int rank) {
  const int64_t seed = window * 100 + micro * 10 + rank;
  auto index = torch::arange(8).unsqueeze(1) + seed;
  auto x =
      ((index * 7 + torch::arange(20).unsqueeze(0) * 13 + seed).remainder(19).to(torch::kFloat) /
       19.0) -
      0.5;
  auto y = (torch::arange(8) + seed).remainder(4);
  return {x, y};
}

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}

// The relative distance between two tensors, against the larger's largest value.
double distance(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(a.abs().max().item<double>(), b.abs().max().item<double>());
  return (a - b).abs().max().item<double>() / std::max(scale, 1e-30);
}

int run() {
  accel::Config config;
  config.set("gradient_accumulation_steps", "2");
  accel::Accelerator acc(config);
  const int rank = acc.process_index(), world = acc.num_processes();
  torch::manual_seed(5);
  Net net;
  auto model = accel::Model::from_module(net);
  accel::Optimizer opt(model, "sgd");
  opt.set("lr", "0.1");
  acc.prepare(model, opt);

  std::map<std::string, const void*> address;
  for (int window = 0; window < 4; ++window) {
    // The expected average, from this window's starting weights, before anything moves them:
    // every rank's two micro-steps on a replica, each loss divided by the accumulation steps.
    std::map<std::string, torch::Tensor> expected;
    for (const auto& p : net.named_parameters())
      expected[p.key()] = torch::zeros_like(p.value().detach());
    for (int r = 0; r < world; ++r)
      for (int micro = 0; micro < 2; ++micro) {
        Net replica;
        std::vector<std::string> names;
        std::vector<torch::Tensor> params;
        {
          torch::NoGradGuard no_grad;
          auto own = net.named_parameters();
          for (const auto& p : replica.named_parameters()) {
            p.value().copy_(own[p.key()]);
            names.push_back(p.key());
            params.push_back(p.value());
          }
        }
        auto [x, y] = batch_of(window, micro, r);
        const auto loss = replica.loss(x, y, micro == 0 && r == 0) / 2.0;
        const auto grads = torch::autograd::grad({loss}, params, {}, false, false, true);
        for (size_t i = 0; i < names.size(); ++i)
          if (grads[i].defined()) expected[names[i]] += grads[i] / world;
      }
    for (int micro = 0; micro < 2; ++micro) {
      acc.accumulate();
      auto [x, y] = batch_of(window, micro, rank);
      torch::Tensor loss;
      {
        auto scope = model.forward_scope();
        loss = net.loss(x, y, micro == 0 && rank == 0);
      }
      acc.backward(accel::Tensor(loss));
    }
    if (!acc.sync_gradients()) return fail(rank, "the second micro-step did not synchronise");
    for (const auto& p : net.named_parameters()) {
      const auto& grad = p.value().grad();
      if (!grad.defined()) return fail(rank, p.key() + " has no gradient after synchronising");
      const double d = distance(grad, expected[p.key()]);
      if (d > 1e-6)
        return fail(rank, p.key() + " in window " + std::to_string(window) + " is " +
                              std::to_string(d) + " (relative) from the average of the ranks");
      if (window == 1) address[p.key()] = grad.data_ptr();
      if (window > 1 && grad.data_ptr() != address[p.key()])
        return fail(rank, p.key() + "'s gradient moved: it is not a bucket view");
    }
    opt.step();
    if (window == 2) {
      // What torch::optim::Optimizer::zero_grad (and so tch-rs) does to each gradient.
      for (auto& p : net.parameters()) {
        p.mutable_grad().detach_();
        p.mutable_grad().zero_();
      }
    } else {
      opt.zero_grad();
    }
    for (const auto& p : net.named_parameters()) {
      const auto& grad = p.value().grad();
      if (window >= 1 && (!grad.defined() || grad.data_ptr() != address[p.key()] ||
                          grad.abs().max().item<float>() != 0.0F))
        return fail(rank, "zero_grad did not zero " + p.key() + "'s bucket view in place");
    }
  }
  for (const auto& p : net.named_parameters()) {
    auto all = acc.gather(accel::Tensor(p.value().detach().clone().unsqueeze(0))).torch();
    for (int64_t r = 1; r < all.size(0); ++r)
      if (!torch::equal(all[r], all[0])) return fail(rank, p.key() + " differs between ranks");
  }
  std::printf("rank %d: bucket views hold\n", rank);
  acc.wait_for_everyone();
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bucket_view_program: %s\n", e.what());
    return 1;
  }
}
