#include "runtime/seed.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace accel::runtime {

at::Generator& library_generator() {
  static at::Generator gen = at::detail::createCPUGenerator(/*seed_val=*/67280421310721ULL);
  return gen;
}

void seed_everything(uint64_t seed) {
  at::manual_seed(seed);  // the default CPU generator and every CUDA generator
  at::Generator& gen = library_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

}  // namespace accel::runtime
