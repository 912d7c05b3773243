// A rank of the ZeRO stage 3 loading tests: a model of a few MB (catalogue layers), checkpoints
// loaded into it after accel_prepare.
//   ram_load_program write DIR   saves a model (seed 11) as DIR/ckpt in 1 MB shards
//   ram_load_program load DIR    builds two models (seeds 5 and 6), prepares them, loads DIR/ckpt
//                                into the first with accel_load_pretrained and into the second
//                                with accel_load_checkpoint_in_model, then saves each with
//                                accel_save_model into DIR/out_pretrained and DIR/out_checkpoint.
// Around each load every rank prints "rank R LOADER read B holds H of T": B the bytes this
// process read (the kernel's count, /proc/self/io rchar: every read and pread of any file or
// socket), H the bytes of the parameters this rank holds (accel_model_tensor refuses the others),
// T those of all the parameters.
#include <accel/accel.hpp>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

accel::Model build() {
  accel::Model m;
  m.add_layer("fc1", "linear", "in_features=256 out_features=1024")
      .add_layer("norm", "layer_norm", "normalized_shape=1024")
      .add_layer("fc2", "linear", "in_features=1024 out_features=1024")
      .add_layer("fc3", "linear", "in_features=1024 out_features=256")
      .define(
          "def forward(self, x):\n"
          "    return "
          "self.fc3.forward(self.fc2.forward(self.norm.forward(self.fc1.forward(x))))\n");
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

long long held_bytes(const accel::Model& m) {
  long long held = 0;
  for (const auto& name : m.tensor_names()) {
    try {
      held += m.tensor(name).element_count() * 4;
    } catch (const accel::Error&) {
      // stage 3 released it: another rank owns it
    }
  }
  return held;
}

template <class F>
void measured(accel::Accelerator& acc, const accel::Model& m, const char* loader, F&& load) {
  const long long before = bytes_read_so_far();
  load();
  const long long read = bytes_read_so_far() - before;
  std::printf("rank %d %s read %lld holds %lld of %lld\n", acc.process_index(), loader, read,
              held_bytes(m), static_cast<long long>(m.parameter_element_count()) * 4);
  std::fflush(stdout);
}

int run(const std::string& mode, const std::string& dir) {
  accel::Accelerator acc;
  if (mode == "write") {
    acc.set_seed(11);
    accel::Model m = build();
    acc.save_model(m, dir + "/ckpt", "1MB");
    return 0;
  }
  acc.set_seed(5);
  accel::Model a = build();
  acc.set_seed(6);
  accel::Model b = build();
  acc.prepare(a, b);
  measured(acc, a, "pretrained", [&] { a.load_pretrained(dir + "/ckpt", "strict=true"); });
  measured(acc, b, "checkpoint", [&] { b.load_checkpoint(dir + "/ckpt"); });
  acc.save_model(a, dir + "/out_pretrained");
  acc.save_model(b, dir + "/out_checkpoint");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ram_load_program write|load DIR\n");
    return 64;
  }
  try {
    return run(argv[1], argv[2]);
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
