// A rank of the merge-weights test: a model of catalogue layers trained under whatever stage the
// environment chooses, saved with accel_save_state, and a merged file loaded back.
//   merge_weights_program train DIR   seed 3, 3 AdamW steps, accel_save_state into DIR/state; each
//                                     rank then writes every parameter it holds to
//                                     DIR/trained/NAME.bin (raw fp32 bytes)
// and prints "rank R holds K of N" for each model dumped.
//   merge_weights_program load FILE OUT
//                                     seed 9, prepared, FILE loaded with
//                                     accel_load_checkpoint_in_model into one model and
//                                     accel_load_pretrained (strict) into another, and through
//                                     a name map swapping norm.weight and norm.bias into a
//                                     third; each rank writes the parameters it holds to
//                                     OUT/checkpoint/, OUT/pretrained/ and OUT/mapped/
// Under ZeRO stage 3 a rank holds the parameters it owns (accel_model_tensor refuses the others),
// so the ranks' files together are the whole model.
#include <accel/accel.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

accel::Model build() {
  accel::Model m;
  m.add_layer("fc1", "linear", "in_features=12 out_features=32")
      .add_layer("norm", "layer_norm", "normalized_shape=32")
      .add_layer("fc2", "linear", "in_features=32 out_features=32")
      .add_layer("fc3", "linear", "in_features=32 out_features=3")
      .define(
          "def forward(self, x):\n"
          "    h = self.norm.forward(torch.relu(self.fc1.forward(x)))\n"
          "    return self.fc3.forward(torch.relu(self.fc2.forward(h)))\n"
          "def loss(self, x, y):\n"
          "    return torch.cross_entropy_loss(self.forward(x), y)\n");
  return m;
}

// Every parameter this rank holds, as raw bytes in DIR/NAME.bin; prints "rank R holds K of N".
void dump_held(accel::Accelerator& acc, const accel::Model& m, const std::string& dir) {
  int held = 0;
  for (const auto& name : m.tensor_names()) {
    std::vector<float> v;
    try {
      v = m.tensor(name).to_vector<float>();
    } catch (const accel::Error&) {
      continue;  // stage 3: another rank owns it
    }
    std::ofstream(dir + "/" + name + ".bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()),
               static_cast<std::streamsize>(v.size() * sizeof(float)));
    ++held;
  }
  std::printf("rank %d holds %d of %zu\n", acc.process_index(), held, m.tensor_names().size());
  std::fflush(stdout);
}

int train(const std::string& dir) {
  accel::Accelerator acc;
  acc.set_seed(3);
  accel::Model model = build();
  accel::Optimizer opt(model, "adamw");
  opt.set("lr", "0.05");
  const int64_t n = 64;
  std::vector<float> xs(static_cast<size_t>(n * 12));
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 12; ++j)
      xs[static_cast<size_t>(i * 12 + j)] = static_cast<float>((i * 5 + j * 11) % 13) / 13.0F;
    ys[static_cast<size_t>(i)] = i % 3;
  }
  auto tx = accel::Tensor::from_data(xs, {n, 12});
  auto ty = accel::Tensor::from_data(ys, {n});
  auto data = accel::Dataset::from_tensors({tx, ty});
  accel::DataLoader loader(acc, data);
  loader.set("batch_size", "8");
  acc.prepare(model, opt, loader);
  for (int step = 0; step < 3;) {
    auto fields = loader.next();
    if (!fields) continue;
    auto out = model.call("loss", {(*fields)[0], (*fields)[1]});
    acc.backward(out.at(0));
    opt.step();
    opt.zero_grad();
    ++step;
  }
  acc.save_state(dir + "/state");
  dump_held(acc, model, dir + "/trained");
  acc.wait_for_everyone();
  return 0;
}

int load(const std::string& file, const std::string& out) {
  accel::Accelerator acc;
  acc.set_seed(9);
  accel::Model a = build();
  accel::Model b = build();
  accel::Model c = build();
  acc.prepare(a, b, c);
  a.load_checkpoint(file);
  b.load_pretrained(file, "strict=true");
  // Both [32]: the mapped names follow every rule, stage 3's reads of what a rank owns included.
  c.load_pretrained(file, "strict=true", [](std::string_view n) -> std::optional<std::string> {
    if (n == "norm.weight") return std::string("norm.bias");
    if (n == "norm.bias") return std::string("norm.weight");
    return std::string(n);
  });
  dump_held(acc, a, out + "/checkpoint");
  dump_held(acc, b, out + "/pretrained");
  dump_held(acc, c, out + "/mapped");
  acc.wait_for_everyone();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "train") return train(argv[2]);
    if (argc == 4 && std::string(argv[1]) == "load") return load(argv[2], argv[3]);
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: merge_weights_program train DIR | load FILE OUT\n");
  return 64;
}
