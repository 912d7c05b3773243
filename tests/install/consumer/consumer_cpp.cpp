// The C++ interface from outside the tree: accel.hpp as installed, no LibTorch. Under
// `accel launch -n 2` it gathers the ranks' indices, checks a failing call throws and builds a
// model and an optimizer with typed options.
#include <accel/accel.hpp>

#include <cstdio>

int main() {
  try {
    accel::Accelerator acc;
    const auto all =
        acc.gather(accel::Tensor::scalar<int64_t>(acc.process_index())).to_vector<int64_t>();
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i] != static_cast<int64_t>(i)) return 2;
    try {
      accel::Config().set("no_such_key", "1");
      return 3;
    } catch (const accel::Error& e) {
      if (e.status() != ACCEL_ERR_CONFIG) return 4;
    }
    // The typed options (options.hpp, installed beside accel.hpp), as C++17 writes them.
    accel::LinearOptions fc;
    fc.in_features = 4;
    fc.out_features = 2;
    accel::Model model;
    model.add_layer("fc", fc);
    accel::AdamWOptions adamw;
    adamw.lr = 5e-3;
    if (accel::Optimizer(model, adamw).lr() != 5e-3) return 6;
    if (acc.is_main_process())
      std::printf("C++ consumer ok: libaccel %s, %d ranks\n", accel::version().c_str(),
                  acc.num_processes());
    return static_cast<int>(all.size()) == acc.num_processes() ? 0 : 5;
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
