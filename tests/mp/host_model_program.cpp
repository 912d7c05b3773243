// A rank of the host-model tests: a torch::nn::Module MLP lent to libaccel through accel.hpp,
// trained 24 SGD steps (momentum 0.9; or STEPS steps of AdamW, the gradients clipped to norm
// 0.01, each step's norm printed as "norm STEP VALUE") on fixed data with batch B per process. Each
// rank seeds LibTorch with its own index, so the ranks start from different weights and only
// accel_prepare's broadcast makes them agree. Rank 0 prints "param NAME v1 v2 ..." for every
// parameter after checking they are bitwise equal on every rank. HOST_MODEL_LEAVE_AT=K: rank 1
// exits (code 0, as if its program ended) just before optimizer step K, so that the others are
// inside that step's collectives when it goes. HOST_MODEL_OWN_OPTIMIZER=1: the SGD is the
// program's own torch::optim::SGD (accel::Optimizer(model, shared_ptr)).
//   host_model_program B [adamw STEPS]
#define ACCEL_WITH_TORCH
#include <accel/accel.hpp>

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "param_lines.hpp"

namespace {

struct Mlp : torch::nn::Module {
  explicit Mlp(int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(20, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(torch::relu(fc1->forward(x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

int run(int batch, bool adamw, int steps) {
  accel::Accelerator acc;
  torch::manual_seed(100 + static_cast<uint64_t>(acc.process_index()));
  // HOST_MODEL_HIDDEN: the hidden width (32). A wide one makes parameters larger than a ZeRO
  // exchange chunk; rank 0 then prints each parameter's sum of squares, absolute sum and largest
  // magnitude instead of its values.
  const char* hidden_env = std::getenv("HOST_MODEL_HIDDEN");
  const int64_t hidden = hidden_env ? std::atoll(hidden_env) : 32;
  Mlp net(hidden);
  auto model = accel::Model::from_module(net);
  // HOST_MODEL_OWN_OPTIMIZER=1: the same SGD as the program's own torch::optim::SGD.
  const bool own = std::getenv("HOST_MODEL_OWN_OPTIMIZER") && !adamw;
  accel::Optimizer opt =
      own ? accel::Optimizer(model,
                             std::make_shared<torch::optim::SGD>(
                                 net.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)))
          : accel::Optimizer(model, adamw ? "adamw" : "sgd");
  if (adamw)
    opt.set("lr", "0.01").set("weight_decay", "0.01");
  else if (!own)
    opt.set("lr", "0.05").set("momentum", "0.9");

  // The data of mp_program's "equiv" mode: 1280 samples, 20 features, 4 classes.
  const int64_t n = 1280;
  auto index = torch::arange(n).unsqueeze(1);
  auto x =
      ((index * 7 + torch::arange(20).unsqueeze(0) * 13).remainder(17).to(torch::kFloat) / 17.0) -
      0.5;
  auto y = (torch::arange(n) * 3).remainder(4);
  accel::Tensor tx(x), ty(y);
  auto data = accel::Dataset::from_tensors({tx, ty});
  accel::DataLoader loader(acc, data);
  loader.set("batch_size", std::to_string(batch));
  acc.prepare(model, opt, loader);

  const char* leave = std::getenv("HOST_MODEL_LEAVE_AT");
  const int leave_at = leave && acc.process_index() == 1 ? std::atoi(leave) : -1;
  for (int step = 0; step < steps;) {
    auto batch_fields = loader.next();
    if (!batch_fields) continue;  // the next epoch
    acc.accumulate();
    torch::Tensor loss;
    {
      auto scope = model.forward_scope();
      loss = torch::cross_entropy_loss(net.forward((*batch_fields)[0].torch()),
                                       (*batch_fields)[1].torch());
    }
    acc.backward(loss);
    // With AdamW the gradients are clipped to a norm they exceed, and the main process prints the
    // norm over every parameter (under ZeRO stage 2 no rank holds all the gradients).
    if (adamw && acc.sync_gradients()) {
      const double norm = acc.clip_grad_norm(model, 0.01);
      if (acc.is_main_process()) std::printf("norm %d %.9g\n", step, norm);
    }
    if (step == leave_at) std::_Exit(0);
    opt.step();
    opt.zero_grad();
    step += acc.sync_gradients();
  }

  for (const auto& p : net.named_parameters()) {
    // Every rank holds the same values, bit for bit.
    auto mine = accel::Tensor(p.value().detach().clone());
    auto all = acc.gather(accel::Tensor(p.value().detach().clone().unsqueeze(0))).torch();
    for (int64_t r = 1; r < all.size(0); ++r)
      if (!torch::equal(all[r], all[0])) {
        std::fprintf(stderr, "rank %d: %s differs from rank 0's\n", acc.process_index(),
                     p.key().c_str());
        return 2;
      }
    if (acc.is_main_process()) {
      auto values = mine.to_vector<float>();
      if (hidden != 32) {
        const auto v = p.value().detach().to(torch::kDouble);
        values = {static_cast<float>(v.square().sum().item<double>()),
                  static_cast<float>(v.abs().sum().item<double>()),
                  static_cast<float>(v.abs().max().item<double>())};
      }
      print_param_line(p.key(), values);
    }
  }
  // set_seed seeds accel.hpp's C++ generator alike on every rank, and apart with device_specific.
  for (const bool device_specific : {false, true}) {
    acc.set_seed(1234, device_specific);
    const auto draw = static_cast<int64_t>(acc.rng()() >> 1);
    const auto all =
        acc.gather(accel::Tensor::from_data<int64_t>({draw}, {1})).to_vector<int64_t>();
    const bool same = std::all_of(all.begin(), all.end(), [&](int64_t d) { return d == all[0]; });
    if (same == (device_specific && all.size() > 1)) {
      std::fprintf(stderr, "rank %d: rng() after set_seed(1234, %d) drew %lld\n",
                   acc.process_index(), device_specific, static_cast<long long>(draw));
      return 3;
    }
  }
  acc.wait_for_everyone();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool adamw = argc == 4 && std::string(argv[2]) == "adamw";
  if (argc != 2 && !adamw) {
    std::fprintf(stderr, "usage: host_model_program BATCH [adamw STEPS]\n");
    return 64;
  }
  try {
    return run(std::atoi(argv[1]), adamw, adamw ? std::atoi(argv[3]) : 24);
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
