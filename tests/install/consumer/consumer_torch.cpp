// docs/cpp.md's own-module path from outside the tree: a torch::nn::Module of the program's,
// lent to libaccel without a copy, trained for a few steps on every rank; the ranks must end with
// the same weights, and the loss must fall.
#define ACCEL_WITH_TORCH
#include <torch/torch.h>
#include <accel/accel.hpp>

#include <cstdio>

struct Net : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  Net() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
  torch::Tensor forward(const torch::Tensor& x) { return fc->forward(x); }
};

int main() {
  try {
    torch::manual_seed(0);
    Net net;
    accel::Accelerator acc;
    auto model = accel::Model::from_module(net);
    accel::Optimizer opt(model, "sgd");
    opt.set("lr", "0.1");
    acc.prepare(model, opt);
    const torch::Tensor x = torch::rand({8, 4});
    const torch::Tensor y = x.sum(1, true);
    double first = 0, last = 0;
    for (int step = 0; step < 20; ++step) {
      torch::Tensor loss;
      {
        auto scope = model.forward_scope();
        loss = torch::mse_loss(net.forward(x), y);
      }
      acc.backward(loss);
      opt.step();
      opt.zero_grad();
      (step == 0 ? first : last) = loss.item<double>();
    }
    // Every rank holds rank 0's weights, stepped with averaged gradients.
    const auto gathered = acc.gather(accel::Tensor(net.fc->weight.detach().clone())).torch();
    for (int64_t r = 1; r < acc.num_processes(); ++r)
      if (!gathered.chunk(acc.num_processes())[r].equal(gathered.chunk(acc.num_processes())[0]))
        return 3;
    if (acc.is_main_process())
      std::printf("C++ torch consumer ok: loss %.4f -> %.4f on %d ranks\n", first, last,
                  acc.num_processes());
    return last < first ? 0 : 2;
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
