// Shard rules, table-driven: for dataset lengths 1-14, batch sizes 1-5, 1-4 processes and every
// combination of split_batches, even_batches and drop_last, the batches each rank gets must equal
// those of a step-by-step simulation of Accelerate's documented procedure (batch sampler, then
// rounds released when every rank has a full batch, then the tail). The library computes the same
// thing in closed form; the two formulations must agree everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/error.hpp"
#include "data/shard.hpp"

using accel::data::epoch_order;
using accel::data::shard_batches;
using accel::data::ShardSpec;
using Batches = std::vector<std::vector<int64_t>>;

namespace {

// torch.utils.data.BatchSampler over a sequence.
Batches batch_sampler(const std::vector<int64_t>& order, int64_t bs, bool drop_last) {
  Batches out;
  std::vector<int64_t> cur;
  for (int64_t i : order) {
    cur.push_back(i);
    if (static_cast<int64_t>(cur.size()) == bs) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty() && !drop_last) out.push_back(cur);
  return out;
}

// Not split: batch i belongs to rank i % P; a round is released only when its last batch is full;
// then the tail (drop_last: nothing; uneven: what is left as is; even: complete the round by
// cycling the first P batches' indices, doubled until long enough).
Batches simulate_no_split(const Batches& batches, int64_t bs, int P, int rank, bool even,
                          bool drop_last) {
  Batches out;
  std::vector<int64_t> initial, mine, last;
  int64_t idx = -1;
  for (const auto& b : batches) {
    ++idx;
    last = b;
    if (!drop_last && idx < P) initial.insert(initial.end(), b.begin(), b.end());
    if (idx % P == rank) mine = b;
    if (idx % P == P - 1 && static_cast<int64_t>(b.size()) == bs) {
      out.push_back(mine);
      mine.clear();
    }
  }
  if (drop_last || initial.empty()) return out;
  if (!even) {
    if (!mine.empty()) out.push_back(mine);
    return out;
  }
  if (static_cast<int64_t>(mine.size()) == bs) out.push_back(mine);
  while (static_cast<int64_t>(initial.size()) < P * bs) {
    auto copy = initial;
    initial.insert(initial.end(), copy.begin(), copy.end());
  }
  std::vector<int64_t> batch = last;
  if (static_cast<int64_t>(batch.size()) == bs) {
    batch.clear();
    ++idx;
  }
  size_t cycle = 0;
  while (idx % P != 0 || !batch.empty()) {
    const size_t need = static_cast<size_t>(bs) - batch.size();
    batch.insert(batch.end(), initial.begin() + cycle, initial.begin() + cycle + need);
    if (idx % P == rank) out.push_back(batch);
    cycle += need;
    batch.clear();
    ++idx;
  }
  return out;
}

// Split: every full batch is cut into P slices; the short last batch is dropped (drop_last), sliced
// as is when the rank's slice starts inside it (uneven), or completed with the first batch (even).
Batches simulate_split(const Batches& batches, int64_t bs, int P, int rank, bool even,
                       bool drop_last) {
  Batches out;
  const int64_t len = bs / P;
  auto slice = [&](const std::vector<int64_t>& b) {
    const auto lo = std::min<size_t>(b.size(), static_cast<size_t>(len * rank));
    const auto hi = std::min<size_t>(b.size(), static_cast<size_t>(len * (rank + 1)));
    return std::vector<int64_t>(b.begin() + lo, b.begin() + hi);
  };
  for (const auto& b : batches)
    if (static_cast<int64_t>(b.size()) == bs) out.push_back(slice(b));
  if (batches.empty() || drop_last) return out;
  std::vector<int64_t> last = batches.back();
  if (static_cast<int64_t>(last.size()) == bs) return out;
  if (!even) {
    if (static_cast<int64_t>(last.size()) > len * rank) out.push_back(slice(last));
    return out;
  }
  std::vector<int64_t> initial = batches.front();
  while (static_cast<int64_t>(initial.size()) < bs) {
    auto copy = initial;
    initial.insert(initial.end(), copy.begin(), copy.end());
  }
  last.insert(last.end(), initial.begin(), initial.end());
  out.push_back(slice(last));
  return out;
}

Batches simulate(const ShardSpec& s, const std::vector<int64_t>& order) {
  const auto batches = batch_sampler(order, s.batch_size, s.drop_last);
  return s.split_batches ? simulate_split(batches, s.batch_size, s.num_processes, s.process_index,
                                          s.even_batches, s.drop_last)
                         : simulate_no_split(batches, s.batch_size, s.num_processes,
                                             s.process_index, s.even_batches, s.drop_last);
}

ShardSpec spec(int64_t n, int64_t bs, int P, int rank, bool split, bool even, bool drop) {
  ShardSpec s;
  s.dataset_size = n;
  s.batch_size = bs;
  s.num_processes = P;
  s.process_index = rank;
  s.split_batches = split;
  s.even_batches = even;
  s.drop_last = drop;
  return s;
}

Batches ours(const ShardSpec& s) {
  return shard_batches(s, epoch_order(s.dataset_size, false, 0, 0), 0);
}

}  // namespace

TEST(Shard, EveryCombinationMatchesTheDocumentedProcedure) {
  int compared = 0, rejected = 0;
  for (int64_t n = 1; n <= 14; ++n)
    for (int64_t bs = 1; bs <= 5; ++bs)
      for (int P = 1; P <= 4; ++P)
        for (int flags = 0; flags < 8; ++flags) {
          const bool split = flags & 1, even = flags & 2, drop = flags & 4;
          for (int rank = 0; rank < P; ++rank) {
            const ShardSpec s = spec(n, bs, P, rank, split, even, drop);
            if (split && bs % P != 0) {
              EXPECT_THROW(ours(s), accel::Error);
              ++rejected;
              continue;
            }
            const auto order = epoch_order(n, false, 0, 0);
            EXPECT_EQ(accel::data::shard_length(s, 0),
                      static_cast<int64_t>(simulate(s, order).size()));
            ASSERT_EQ(ours(s), simulate(s, order))
                << "n=" << n << " bs=" << bs << " P=" << P << " rank=" << rank << " split=" << split
                << " even=" << even << " drop_last=" << drop;
            ++compared;
          }
        }
  EXPECT_GT(compared, 3000);
  EXPECT_GT(rejected, 100);
}

TEST(Shard, AccelerateWorkedExamples) {
  // (n, bs, P, split, even, drop_last) -> batches of rank 0, rank 1 [, rank 2]; from Accelerate's
  // docs and its BatchSamplerShard run in isolation.
  struct Example {
    int64_t n, bs;
    int P;
    bool split, even, drop;
    std::vector<Batches> ranks;
  };
  const std::vector<Example> examples = {
      {10, 3, 2, false, true, false, {{{0, 1, 2}, {6, 7, 8}}, {{3, 4, 5}, {9, 0, 1}}}},
      {10, 3, 2, false, false, false, {{{0, 1, 2}, {6, 7, 8}}, {{3, 4, 5}, {9}}}},
      {10, 3, 2, false, true, true, {{{0, 1, 2}}, {{3, 4, 5}}}},
      {10, 4, 2, false, true, false, {{{0, 1, 2, 3}, {8, 9, 0, 1}}, {{4, 5, 6, 7}, {2, 3, 4, 5}}}},
      {10, 4, 2, false, false, false, {{{0, 1, 2, 3}, {8, 9}}, {{4, 5, 6, 7}}}},
      {10, 4, 2, true, true, false, {{{0, 1}, {4, 5}, {8, 9}}, {{2, 3}, {6, 7}, {0, 1}}}},
      {10, 4, 2, true, false, false, {{{0, 1}, {4, 5}, {8, 9}}, {{2, 3}, {6, 7}}}},
      {10, 4, 2, true, true, true, {{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}}},
      {9, 2, 2, false, true, false, {{{0, 1}, {4, 5}, {8, 0}}, {{2, 3}, {6, 7}, {1, 2}}}},
      {3, 2, 2, false, true, false, {{{0, 1}}, {{2, 0}}}},
      {10,
       3,
       3,
       false,
       true,
       false,
       {{{0, 1, 2}, {9, 0, 1}}, {{3, 4, 5}, {2, 3, 4}}, {{6, 7, 8}, {5, 6, 7}}}},
  };
  for (const auto& e : examples)
    for (int rank = 0; rank < e.P; ++rank)
      EXPECT_EQ(ours(spec(e.n, e.bs, e.P, rank, e.split, e.even, e.drop)), e.ranks[rank])
          << "n=" << e.n << " bs=" << e.bs << " P=" << e.P << " rank " << rank;
}

TEST(Shard, SplitNeedsADivisibleBatchSize) {
  try {
    ours(spec(10, 3, 2, 0, true, true, false));
    FAIL();
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the number of processes (2)"),
              std::string::npos);
  }
  EXPECT_THROW(ours(spec(10, 0, 1, 0, false, true, false)), accel::Error);
  EXPECT_THROW(ours(spec(10, 2, 2, 2, false, true, false)), accel::Error);
}

TEST(Shard, RemainderAsAccelerate) {
  EXPECT_EQ(accel::data::remainder(spec(10, 3, 2, 0, false, true, false), 0), 4);
  EXPECT_EQ(accel::data::remainder(spec(12, 3, 2, 0, false, true, false), 0), 0);
  EXPECT_EQ(accel::data::remainder(spec(10, 3, 2, 0, false, true, true), 0), -1);
  EXPECT_EQ(accel::data::remainder(spec(10, 4, 2, 0, true, true, false), 0), 2);
  EXPECT_EQ(accel::data::remainder(spec(10, 3, 2, 0, false, true, false), 6), 4);
}

TEST(Shard, EvenBatchesGiveEveryRankTheSameFullBatchesAndCoverEverySample) {
  for (int64_t n = 1; n <= 30; ++n)
    for (int P = 1; P <= 4; ++P) {
      std::set<int64_t> seen;
      size_t count = 0;
      for (int rank = 0; rank < P; ++rank) {
        const auto b = ours(spec(n, 3, P, rank, false, true, false));
        if (rank == 0) count = b.size();
        EXPECT_EQ(b.size(), count) << "n=" << n << " P=" << P;
        for (const auto& batch : b) {
          EXPECT_EQ(batch.size(), 3u);
          seen.insert(batch.begin(), batch.end());
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "n=" << n << " P=" << P;
    }
}

TEST(Shard, PermutationDependsOnSeedAndEpochOnly) {
  const auto a = epoch_order(100, true, 42, 0);
  EXPECT_EQ(a, epoch_order(100, true, 42, 0));
  EXPECT_NE(a, epoch_order(100, true, 42, 1));
  EXPECT_NE(a, epoch_order(100, true, 43, 0));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, epoch_order(100, false, 0, 0));
  EXPECT_NE(a, sorted);
}

TEST(Shard, OneTimes64SeesWhatTwoTimes32Sees) {
  const int64_t n = 1000;
  const auto order = epoch_order(n, true, 7, 3);
  const auto one = shard_batches(spec(n, 64, 1, 0, false, true, false), order, 0);
  const auto r0 = shard_batches(spec(n, 32, 2, 0, false, true, false), order, 0);
  const auto r1 = shard_batches(spec(n, 32, 2, 1, false, true, false), order, 0);
  ASSERT_EQ(one.size(), r0.size());
  for (size_t step = 0; step + 1 < one.size(); ++step) {  // the padded last step differs in padding
    std::vector<int64_t> both = r0[step];
    both.insert(both.end(), r1[step].begin(), r1[step].end());
    EXPECT_EQ(both, one[step]) << "global step " << step;
  }
  // Split batches: 1 x 64 and 2 processes splitting 64 are the same too, to the last sample.
  const auto s0 = shard_batches(spec(n, 64, 2, 0, true, true, false), order, 0);
  const auto s1 = shard_batches(spec(n, 64, 2, 1, true, true, false), order, 0);
  for (size_t step = 0; step + 1 < one.size(); ++step) {
    std::vector<int64_t> both = s0[step];
    both.insert(both.end(), s1[step].begin(), s1[step].end());
    EXPECT_EQ(both, one[step]);
  }
}

TEST(Shard, ResumingMidEpochContinuesWithTheNextUnseenSample) {
  const int64_t n = 103;
  const auto order = epoch_order(n, true, 1, 0);
  // Same process count: resuming after k rounds gives the remaining rounds exactly.
  for (int rank = 0; rank < 2; ++rank) {
    const auto full = shard_batches(spec(n, 4, 2, rank, false, true, false), order, 0);
    const auto resumed = shard_batches(spec(n, 4, 2, rank, false, true, false), order, 5 * 8);
    EXPECT_EQ(resumed, Batches(full.begin() + 5, full.end()));
  }
  // Another process count: the samples after the cursor, each exactly once before any padding.
  for (int P = 1; P <= 3; ++P) {
    std::map<int64_t, int> count;
    for (int rank = 0; rank < P; ++rank)
      for (const auto& b : shard_batches(spec(n, 4, P, rank, false, false, false), order, 40))
        for (int64_t i : b) ++count[i];
    EXPECT_EQ(static_cast<int64_t>(count.size()), n - 40) << "P=" << P;
    for (int64_t k = 40; k < n; ++k) EXPECT_EQ(count[order[k]], 1) << "P=" << P;
  }
}
