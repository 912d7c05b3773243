// torch::optim::AdamW with the same arithmetic and one temporary fewer per parameter: its step
// computes the denominator as `(exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)`, two parameter-sized
// tensors alive at once; here the division and addition happen in place on the square root. The
// operations and their order are LibTorch's, so the results are bitwise the same (a core test
// compares them); the state is AdamWParamState, so checkpoints and the state accessors see no
// difference. The saving is the largest parameter's size at the step's peak, which is the peak of
// a sharded (ZeRO) job.
#pragma once

#include <torch/optim/adamw.h>

namespace accel::optim {

class LeanAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace accel::optim
