// A rank of the ZeRO stage 3 tests: a model of catalogue layers with a TorchScript forward (the
// kind whose parameters stage 3 releases), trained STEPS AdamW steps on mp_program's "equiv" data,
// batch B per process, the gradients clipped to norm 0.01 ("norm STEP VALUE" from the main
// process). The forward modifies a unit's output in place and the loss method calls forward on
// the model itself. Before training: an eval forward without backward, and a read of a parameter
// this rank does not hold ("refused: ..." when refused). After: every rank calls save_model into
// DIR; rank 0 loads it into a new, unprepared model and prints "param NAME v1 v2 ..." for each.
// SHARDED_LEAVE_AT=K: rank 1 exits (code 0) just before step K's forward, whose gathers the others
// are then in.
//   sharded_model_program B STEPS DIR
#include <accel/accel.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "param_lines.hpp"

namespace {

accel::Model build() {
  accel::Model m;
  m.add_layer("fc1", "linear", "in_features=20 out_features=24")
      .add_layer("norm", "layer_norm", "normalized_shape=24")
      .add_layer("fc2", "linear", "in_features=24 out_features=24")
      .add_layer("fc3", "linear", "in_features=24 out_features=4")
      .define(
          "def forward(self, x):\n"
          "    h = self.norm.forward(torch.relu(self.fc1.forward(x)))\n"
          "    g = self.fc2.forward(h)\n"
          "    g.relu_()\n"
          "    return self.fc3.forward(g + h)\n"
          "def loss(self, x, y):\n"
          "    return torch.cross_entropy_loss(self.forward(x), y)\n");
  return m;
}

int run(int batch, int steps, const std::string& dir) {
  accel::Accelerator acc;
  acc.set_seed(7);
  accel::Model model = build();
  accel::Optimizer opt(model, "adamw");
  opt.set("lr", "0.01").set("weight_decay", "0.01");

  // mp_program's "equiv" data: 1280 samples, 20 features, 4 classes.
  const int64_t n = 1280;
  std::vector<float> xs(static_cast<size_t>(n * 20));
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 20; ++j)
      xs[static_cast<size_t>(i * 20 + j)] =
          static_cast<float>((i * 7 + j * 13) % 17) / 17.0F - 0.5F;
    ys[static_cast<size_t>(i)] = (i * 3) % 4;
  }
  auto tx = accel::Tensor::from_data(xs, {n, 20});
  auto ty = accel::Tensor::from_data(ys, {n});
  auto data = accel::Dataset::from_tensors({tx, ty});
  accel::DataLoader loader(acc, data);
  loader.set("batch_size", std::to_string(batch));
  acc.prepare(model, opt, loader);

  // Nothing of a forward without backward stays gathered, and a parameter this rank does not
  // hold is refused by name, not read.
  {
    model.eval();
    auto probe = accel::Tensor::from_data(std::vector<float>(40, 0.25F), {2, 20});
    model.call("forward", {probe});
    model.train();
    for (const auto& name : model.tensor_names()) {
      try {
        model.tensor(name);
      } catch (const accel::Error& e) {
        if (acc.process_index() == 0) std::printf("refused: %s\n", e.what());
        break;
      }
    }
  }

  const char* leave = std::getenv("SHARDED_LEAVE_AT");
  const int leave_at = leave && acc.process_index() == 1 ? std::atoi(leave) : -1;
  for (int step = 0; step < steps;) {
    auto fields = loader.next();
    if (!fields) continue;  // the next epoch
    if (step == leave_at) std::_Exit(0);
    acc.accumulate();
    auto out = model.call("loss", {(*fields)[0], (*fields)[1]});
    const accel::Tensor& loss = out.at(0);
    acc.backward(loss);
    if (acc.sync_gradients()) {
      const double norm = acc.clip_grad_norm(model, 0.01);
      if (acc.is_main_process()) std::printf("norm %d %.9g\n", step, norm);
    }
    opt.step();
    opt.zero_grad();
    step += acc.sync_gradients();
  }

  acc.save_model(model, dir);
  if (acc.is_main_process()) {
    accel::Model saved = build();
    saved.load_checkpoint(dir);
    for (const auto& name : saved.tensor_names())
      print_param_line(name, saved.tensor(name).to_vector<float>());
  }
  acc.wait_for_everyone();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: sharded_model_program BATCH STEPS DIR\n");
    return 64;
  }
  try {
    return run(std::atoi(argv[1]), std::atoi(argv[2]), argv[3]);
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
