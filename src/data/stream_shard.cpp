#include "data/stream_shard.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"
#include "data/shard.hpp"

namespace accel::data {

namespace {

// The same rules as a map-style loader's (batch size, rank, split_batches divisibility).
void check(const StreamSpec& s) {
  ShardSpec spec;
  spec.batch_size = s.batch_size;
  spec.num_processes = s.num_processes;
  spec.process_index = s.process_index;
  spec.split_batches = s.split_batches;
  validate(spec);
}

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t begin, int64_t count) {
  return std::vector<int64_t>(v.begin() + begin, v.begin() + begin + count);
}

std::vector<int64_t> shard_take(const StreamSpec& s, std::vector<int64_t> batch,
                                const std::vector<int64_t>& first) {
  const int64_t global = stream_global_batch(s);
  const int64_t share = s.split_batches ? s.batch_size / s.num_processes : s.batch_size;
  if (static_cast<int64_t>(batch.size()) < global) {
    if (s.drop_last || batch.empty()) return {};
    if (s.num_processes == 1) return batch;  // one process is not sharded: the short batch stays
    const std::vector<int64_t> pad = first.empty() ? batch : first;
    while (static_cast<int64_t>(batch.size()) < global)
      batch.insert(batch.end(), pad.begin(), pad.end());
  }
  return slice(batch, share * s.process_index, share);
}

std::vector<int64_t> dispatch_take(const StreamSpec& s, const std::vector<int64_t>& batch,
                                   const std::vector<int64_t>& first, bool last) {
  const DispatchPlan plan = dispatch_plan(s, batch, first, last);
  const auto [begin, end] =
      dispatch_rows(static_cast<int64_t>(plan.rows.size()), plan.share, s.process_index);
  return slice(plan.rows, begin, end - begin);
}

}  // namespace

DispatchPlan dispatch_plan(const StreamSpec& s, const std::vector<int64_t>& batch,
                           const std::vector<int64_t>& first, bool last) {
  check(s);
  DispatchPlan plan;
  plan.rows = stream_kept(s, batch);
  if (plan.rows.empty()) return plan;
  const auto P = static_cast<int64_t>(s.num_processes);
  const auto rows = static_cast<int64_t>(plan.rows.size());
  plan.share = rows / P;
  if (!s.drop_last && last && rows % P != 0) {
    // The first P rows of the epoch's first global batch (fewer if it had fewer).
    const std::vector<int64_t>& head = first.empty() ? plan.rows : first;
    const auto take = std::min<int64_t>(P, static_cast<int64_t>(head.size()));
    plan.rows.insert(plan.rows.end(), head.begin(), head.begin() + take);
    ++plan.share;
  }
  return plan;
}

std::pair<int64_t, int64_t> dispatch_rows(int64_t size, int64_t share, int rank) {
  const int64_t begin = std::min(size, share * rank);
  return {begin, std::min(size, begin + share)};
}

int64_t stream_global_batch(const StreamSpec& s) {
  return s.split_batches ? s.batch_size : s.batch_size * s.num_processes;
}

std::vector<int64_t> stream_kept(const StreamSpec& s, const std::vector<int64_t>& batch) {
  // With drop_last the main process reads whole batches, and dispatches only a complete round of
  // P of them (one when split): a short global batch is dropped altogether.
  if (s.dispatch && s.drop_last && static_cast<int64_t>(batch.size()) < stream_global_batch(s))
    return {};
  return batch;
}

std::vector<int64_t> stream_take(const StreamSpec& s, const std::vector<int64_t>& batch,
                                 const std::vector<int64_t>& first, bool last) {
  check(s);
  return s.dispatch ? dispatch_take(s, batch, first, last) : shard_take(s, batch, first);
}

std::vector<std::vector<int64_t>> stream_epoch(const StreamSpec& s, int64_t n) {
  check(s);
  const int64_t global = stream_global_batch(s);
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> first;
  for (int64_t begin = 0; begin < n; begin += global) {
    std::vector<int64_t> batch;
    for (int64_t p = begin; p < std::min(n, begin + global); ++p) batch.push_back(p);
    if (first.empty()) first = batch;
    auto mine = stream_take(s, batch, first, begin + global >= n);
    if (!mine.empty()) out.push_back(std::move(mine));
  }
  return out;
}

}  // namespace accel::data
