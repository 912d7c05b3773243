// The large-tensor block cache: blocks reused by size class, kept while steps use them, unmapped
// when they do not.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/block_cache.hpp"

using accel::runtime::BlockCache;

TEST(BlockCache, SizeClassesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(BlockCache::size_class(1 << 20), size_t{1} << 20);
  EXPECT_EQ(BlockCache::size_class((1 << 20) + 1), (size_t{1} << 20) + (128 << 10));
  for (size_t bytes : {size_t{1} << 20, size_t{3000000}, size_t{9437184}, size_t{123456789}}) {
    const size_t c = BlockCache::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c - bytes, bytes / 8) << bytes;
    EXPECT_EQ(c % 4096, 0u) << "whole pages";
  }
}

TEST(BlockCache, AFreedBlockServesTheNextRequestOfItsClass) {
  BlockCache cache;
  void* a = cache.allocate(3 << 20);
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, 3 << 20);
  ASSERT_TRUE(cache.release(a));
  EXPECT_EQ(cache.free_bytes(), BlockCache::size_class(3 << 20));
  void* b = cache.allocate((3 << 20) - 100);  // the same class
  EXPECT_EQ(b, a) << "no new mapping, no page faults";
  void* c = cache.allocate(5 << 20);  // another class
  EXPECT_NE(c, a);
  EXPECT_EQ(cache.mapped_bytes(),
            BlockCache::size_class(3 << 20) + BlockCache::size_class(5 << 20));
  EXPECT_TRUE(cache.release(b));
  EXPECT_TRUE(cache.release(c));
}

TEST(BlockCache, PointersNotItsOwnAreNotTaken) {
  BlockCache cache;
  int local = 0;
  EXPECT_FALSE(cache.release(&local));
  void* a = cache.allocate(2 << 20);
  EXPECT_TRUE(cache.release(a));
  EXPECT_FALSE(cache.release(a)) << "twice is not its own any more";
}

TEST(BlockCache, BlocksTheStepsStopUsingAreUnmapped) {
  BlockCache cache;
  const size_t used = BlockCache::size_class(2 << 20), once = BlockCache::size_class(7 << 20);
  cache.release(cache.allocate(7 << 20));  // only the first step asks for this one
  for (uint64_t step = 0; step < BlockCache::kKeepSteps + 2; ++step) {
    cache.release(cache.allocate(2 << 20));  // every step asks for this one
    cache.end_of_step();
    if (step + 1 < BlockCache::kKeepSteps)
      EXPECT_EQ(cache.free_bytes(), used + once) << "kept for a few step ends: step " << step;
  }
  EXPECT_EQ(cache.free_bytes(), used) << "what the steps use stays, the rest went";
  EXPECT_EQ(cache.mapped_bytes(), used);
}

TEST(BlockCache, ABlockInUseIsNeverUnmapped) {
  BlockCache cache;
  auto* a = static_cast<unsigned char*>(cache.allocate(4 << 20));
  for (uint64_t step = 0; step < 2 * BlockCache::kKeepSteps; ++step) cache.end_of_step();
  a[(4 << 20) - 1] = 7;  // still mapped
  EXPECT_EQ(cache.mapped_bytes(), BlockCache::size_class(4 << 20));
  EXPECT_TRUE(cache.release(a));
}
