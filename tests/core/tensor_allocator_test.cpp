// libaccel's CPU allocator as LibTorch sees it: large tensors reuse their blocks from step to step,
// small ones and raw allocations still work.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include "runtime/tensor_allocator.hpp"

TEST(TensorAllocator, LargeTensorsReuseTheirBlocksFromStepToStep) {
  const std::string what = accel::runtime::install_tensor_allocator();
  if (what.find("block cache") == std::string::npos) GTEST_SKIP() << what;
  void* first = nullptr;
  for (int step = 0; step < 5; ++step) {
    at::Tensor activations = at::ones({1024, 1024});  // 4 MiB
    at::Tensor small = at::ones({16});
    EXPECT_EQ(activations.sum().item<float>(), 1024.0f * 1024.0f);
    EXPECT_EQ(small.sum().item<float>(), 16.0f);
    if (step == 0) first = activations.data_ptr();
    EXPECT_EQ(activations.data_ptr(), first) << "step " << step << ": the same block again";
    activations.reset();
    accel::runtime::tensor_memory_step_ended();
  }
  // Raw allocations go through the same allocator and back.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  for (size_t bytes : {size_t{64}, size_t{8} << 20}) {
    void* p = cpu->raw_allocate(bytes);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[bytes - 1] = 1;
    cpu->raw_deallocate(p);
  }
}
