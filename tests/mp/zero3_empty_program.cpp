// A rank of the ZeRO-3-from-an-empty-model tests (zero3_empty_test.cpp): a model of catalogue
// layers built empty (accel_model_new_empty), prepared, then loaded.
//   zero3_empty_program write DIR          one process: a model (seed 11) saved as DIR/ckpt in
//                                          small shards, and one without bn and fc3 as
//                                          DIR/partial
//   zero3_empty_program train whole|empty DIR OUT
//       whole: built with its weights, DIR/ckpt loaded before accel_prepare (the reference);
//       empty: built empty, prepared, used before loading (forward, tensor, step, save_model,
//       save_state: each prints "refused R WHAT STATUS: message"), then DIR/ckpt loaded after
//       accel_prepare ("rank R read B holds H of T buffers U": /proc/self/io's bytes read by the
//       load, the parameter bytes this rank holds of all, the buffer bytes it holds).
//       Either way: "out R ..." the forward of a fixed batch (%a), 3 AdamW steps on each rank's
//       rows ("loss R STEP %a"), then accel_save_model into OUT.
//   zero3_empty_program partial DIR OUT    an empty model prepared (when several processes),
//                                          seeded 3, DIR/partial loaded not strict (bn and fc3
//                                          missing), saved into OUT
//   zero3_empty_program refuse             an empty model's accel_prepare: "refused ..." or
//                                          "prepared"
#include <accel/accel.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

// fc1, norm, fc2, then (with the head) a batch norm, whose buffers an empty build with
// `include_buffers` leaves empty too (stage 3 allocates them whole on every rank), and fc3.
accel::Model build(bool empty, bool with_head = true, bool include_buffers = false) {
  accel::Model m = empty ? accel::Model::new_empty(include_buffers) : accel::Model();
  m.add_layer("fc1", "linear", "in_features=32 out_features=96")
      .add_layer("norm", "layer_norm", "normalized_shape=96")
      .add_layer("fc2", "linear", "in_features=96 out_features=64");
  if (!with_head) return m;
  m.add_layer("bn", "batch_norm2d", "num_features=64")
      .add_layer("fc3", "linear", "in_features=64 out_features=8")
      .define(
          "def forward(self, x):\n"
          "    h = torch.relu(self.norm.forward(self.fc1.forward(x)))\n"
          "    g = torch.relu(self.fc2.forward(h))\n"
          "    g = self.bn.forward(g.view([g.size(0), 64, 1, 1])).view([g.size(0), 64])\n"
          "    return self.fc3.forward(g)\n"
          "def loss(self, x, y):\n"
          "    return torch.cross_entropy_loss(self.forward(x), y)\n");
  return m;
}

long long bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = -1;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

bool is_buffer(const std::string& name) {
  return name.find("running_") != std::string::npos ||
         name.find("num_batches") != std::string::npos;
}

// The bytes of the parameters (or the buffers) this rank holds.
long long held_bytes(const accel::Model& m, bool buffers) {
  long long held = 0;
  for (const auto& name : m.tensor_names()) {
    if (is_buffer(name) != buffers) continue;
    try {
      const accel::Tensor t = m.tensor(name);
      held += t.element_count() * (name.find("num_batches") != std::string::npos ? 8 : 4);
    } catch (const accel::Error&) {
      // stage 3: another rank owns it
    }
  }
  return held;
}

void refused(int rank, const char* what, const std::function<void()>& use) {
  try {
    use();
    std::printf("allowed %d %s\n", rank, what);
  } catch (const accel::Error& e) {
    std::printf("refused %d %s %s\n", rank, what, e.what());
  }
  std::fflush(stdout);
}

// Rows [from, from + n) of a fixed data set: 32 features, 8 classes.
std::pair<accel::Tensor, accel::Tensor> batch(int64_t from, int64_t n) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = from; i < from + n; ++i) {
    for (int64_t j = 0; j < 32; ++j)
      xs.push_back(static_cast<float>((i * 7 + j * 13) % 17) / 17.0F - 0.5F);
    ys.push_back((i * 3) % 8);
  }
  return {accel::Tensor::from_data(xs, {n, 32}), accel::Tensor::from_data(ys, {n})};
}

void train(accel::Accelerator& acc, accel::Model& m, accel::Optimizer& opt) {
  const int rank = acc.process_index();
  {
    auto [x, y] = batch(0, 4);
    std::string line = "out " + std::to_string(rank);
    char buf[64];
    for (float v : m.call("forward", {x})[0].to_vector<float>()) {
      std::snprintf(buf, sizeof buf, " %a", static_cast<double>(v));
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(static_cast<int64_t>((step * acc.num_processes() + rank) * 4), 4);
    auto outs = m.call("loss", {x, y});
    const accel::Tensor& loss = outs[0];
    acc.backward(loss);
    opt.step();
    opt.zero_grad();
    std::printf("loss %d %d %a\n", rank, step, static_cast<double>(loss.to_vector<float>()[0]));
  }
  std::fflush(stdout);
}

int run(const std::vector<std::string>& a) {
  accel::Accelerator acc;
  const int rank = acc.process_index();
  const std::string mode = a.at(0);
  if (mode == "write") {
    acc.set_seed(11);
    accel::Model m = build(false);
    acc.save_model(m, a.at(1) + "/ckpt", "20KB");
    accel::Model partial = build(false, /*with_head=*/false);
    acc.save_model(partial, a.at(1) + "/partial");
    return 0;
  }
  if (mode == "refuse") {
    accel::Model m = build(true);
    refused(rank, "prepare", [&] { acc.prepare(m); });
    return 0;
  }
  if (mode == "partial") {
    accel::Model m = build(true, true, /*include_buffers=*/true);
    if (acc.num_processes() > 1) acc.prepare(m);
    acc.set_seed(3);
    const auto report = m.load_pretrained(a.at(1) + "/partial", "strict=false");
    std::printf("rank %d missing %zu\n", rank, report.missing.size());
    acc.save_model(m, a.at(2));
    return 0;
  }
  const bool empty = a.at(1) == "empty";
  const std::string ckpt = a.at(2) + "/ckpt";
  acc.set_seed(5);
  accel::Model m = build(empty, true, /*include_buffers=*/true);
  if (!empty) m.load_checkpoint(ckpt);
  accel::Optimizer opt(m, "adamw");
  opt.set("lr", "0.01");
  acc.prepare(m, opt);
  if (empty) {
    auto [x, y] = batch(0, 4);
    refused(rank, "forward", [&] { m.call("forward", {x}); });
    refused(rank, "tensor", [&] { m.tensor("fc2.weight"); });
    refused(rank, "step", [&] { opt.step(); });
    refused(rank, "save", [&] { acc.save_model(m, a.at(3) + "_early"); });
    refused(rank, "save_state", [&] { acc.save_state(a.at(3) + "_state"); });
    const long long before = bytes_read_so_far();
    m.load_pretrained(ckpt, "strict=true");
    const long long read = bytes_read_so_far() - before;
    std::printf("rank %d read %lld holds %lld of %lld buffers %lld\n", rank, read,
                held_bytes(m, false), static_cast<long long>(m.parameter_element_count()) * 4,
                held_bytes(m, true));
  }
  train(acc, m, opt);
  acc.save_model(m, a.at(3));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: zero3_empty_program write|train|partial|refuse ...\n");
    return 64;
  }
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
