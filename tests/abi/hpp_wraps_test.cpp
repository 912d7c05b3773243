// accel.hpp's wrappers of the C functions it gained for issue 49 (bindings/left_out.txt lists
// the ones it still leaves out): one process, each against what the C function returns.
#include <accel/accel.hpp>

#include <gtest/gtest.h>

TEST(CppWraps, VersionAccelerator) {
  EXPECT_EQ(accel::version_number(), accel_version_number());
  EXPECT_EQ(accel::version_number(), static_cast<uint32_t>(ACCEL_VERSION_NUMBER));
  accel::Accelerator acc;
  EXPECT_EQ(acc.distributed_type(), ACCEL_DISTRIBUTED_NO);
  EXPECT_FALSE(acc.effective_config().empty());
  EXPECT_EQ(acc.main_process_first([] { return 3; }), 3);
  bool ran = false;
  acc.main_process_first([&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_THROW(acc.main_process_first([]() -> int { throw std::runtime_error("x"); }),
               std::runtime_error);
}

TEST(CppWraps, CollectivesOfOneProcess) {
  accel::Accelerator acc;
  auto t = accel::Tensor::from_data<float>({1, 2, 3}, {3});
  EXPECT_EQ(acc.pad_across_processes(t, 0, -1.0, true).to_vector<float>(),
            (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(acc.gather_object(std::string("he\0llo", 6)),
            (std::vector<std::string>{std::string("he\0llo", 6)}));
  EXPECT_EQ(acc.gather_object(""), (std::vector<std::string>{""}));
}

TEST(CppWraps, DataLoaderCursor) {
  accel::Accelerator acc;
  auto x = accel::Tensor::from_data<float>({1, 2, 3, 4, 5}, {5});
  auto y = accel::Tensor::from_data<int64_t>({0, 1, 0, 1, 0}, {5});
  auto ds = accel::Dataset::from_tensors({&x, &y});
  EXPECT_EQ(ds.field_count(), 2u);
  accel::DataLoader dl(acc, ds);
  dl.set("batch_size", "2");
  EXPECT_EQ(dl.field_count(), 2u);
  EXPECT_EQ(dl.epoch(), 0);
  dl.skip_first_batches(1);
  int batches = 0;
  bool ended = false;
  while (auto batch = dl.next()) {
    ++batches;
    ended = dl.end_of_epoch();
  }
  EXPECT_EQ(batches, 2);
  EXPECT_TRUE(ended);
  EXPECT_EQ(dl.remainder(), 1);
  dl.set_position(4, 2);
  EXPECT_EQ(dl.position(), std::make_pair(int64_t{4}, int64_t{2}));
  dl.close();
  EXPECT_THROW(dl.next(), accel::Error);
}
