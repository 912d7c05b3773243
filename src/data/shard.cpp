#include "data/shard.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace accel::data {

namespace {

// splitmix64: a small, well-mixed generator whose output is fixed by its seed on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias (rejection of the short top range).
  uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % bound;
  }
};

// `length` samples from `pad` repeated from its start.
void append_cycled(std::vector<int64_t>& out, const std::vector<int64_t>& pad, int64_t length) {
  for (int64_t i = 0; i < length; ++i) out.push_back(pad[static_cast<size_t>(i) % pad.size()]);
}

}  // namespace

void validate(const ShardSpec& spec) {
  if (spec.batch_size < 1)
    fail(Errc::invalid_argument,
         "batch_size must be at least 1, got " + std::to_string(spec.batch_size));
  if (spec.num_processes < 1 || spec.process_index < 0 || spec.process_index >= spec.num_processes)
    fail(Errc::invalid_argument, "process index " + std::to_string(spec.process_index) +
                                     " is not in 0.." + std::to_string(spec.num_processes - 1));
  if (spec.dataset_size < 0) fail(Errc::invalid_argument, "dataset size is negative");
  if (spec.split_batches && spec.batch_size % spec.num_processes != 0)
    fail(Errc::invalid_argument,
         "split_batches cuts each batch into one slice per process, so batch_size (" +
             std::to_string(spec.batch_size) + ") must be a multiple of the number of processes (" +
             std::to_string(spec.num_processes) + ")");
}

int64_t global_batch_size(const ShardSpec& spec) {
  return spec.split_batches ? spec.batch_size : spec.batch_size * spec.num_processes;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (!shuffle) return order;
  // Mix seed and epoch so that neighbouring epochs (and seeds) give unrelated permutations.
  SplitMix64 mix{seed};
  SplitMix64 rng{mix.next() ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(epoch + 1))};
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> group_by_length(const std::vector<int64_t>& order,
                                     const std::vector<int64_t>& lengths, int64_t global_batch) {
  if (global_batch < 1) fail(Errc::invalid_argument, "group_by_length: global batch below 1");
  const auto n = static_cast<int64_t>(order.size());
  const int64_t mult = std::max<int64_t>(1, std::min<int64_t>(n / (global_batch * 4), 50));
  const int64_t mega = mult * global_batch;
  auto length_of = [&](int64_t i) { return lengths.at(static_cast<size_t>(i)); };
  std::vector<int64_t> out(order);
  int64_t longest_head = -1;  // the first megabatch whose head is the longest
  for (int64_t begin = 0; begin < n; begin += mega) {
    const auto first = out.begin() + begin, last = out.begin() + std::min(n, begin + mega);
    std::stable_sort(first, last,
                     [&](int64_t a, int64_t b) { return length_of(a) > length_of(b); });
    if (longest_head < 0 || length_of(*first) > length_of(out[static_cast<size_t>(longest_head)]))
      longest_head = begin;
  }
  if (longest_head > 0) std::swap(out[0], out[static_cast<size_t>(longest_head)]);
  return out;
}

std::vector<std::vector<int64_t>> shard_batches(const ShardSpec& spec,
                                                const std::vector<int64_t>& order, int64_t start) {
  validate(spec);
  const auto n = static_cast<int64_t>(order.size());
  start = std::clamp<int64_t>(start, 0, n);
  const int64_t global = global_batch_size(spec);
  // What this rank takes of each global batch: a whole per-rank batch, or its slice.
  const int64_t share = spec.split_batches ? spec.batch_size / spec.num_processes : spec.batch_size;
  const int64_t offset = share * spec.process_index;
  const int64_t left = n - start;
  const int64_t full = left / global;
  const int64_t partial = left % global;

  std::vector<std::vector<int64_t>> out;
  auto take = [&](const int64_t* first, int64_t count) { out.emplace_back(first, first + count); };
  for (int64_t k = 0; k < full; ++k) take(order.data() + start + k * global + offset, share);
  if (partial == 0 || spec.drop_last) return out;

  std::vector<int64_t> last(order.begin() + start + full * global, order.end());
  if (spec.even_batches) {
    // Completed with samples from the start of the epoch: the first global batch (split) or the
    // first num_processes batches (not split), repeated when the dataset is smaller than that.
    const int64_t pad_len = std::min<int64_t>(n, global);
    const std::vector<int64_t> pad(order.begin(), order.begin() + pad_len);
    append_cycled(last, pad, global - partial);
    take(last.data() + offset, share);
  } else if (offset < partial) {
    take(last.data() + offset, std::min(share, partial - offset));
  }
  return out;
}

int64_t shard_length(const ShardSpec& spec, int64_t start) {
  validate(spec);
  const int64_t left = spec.dataset_size - std::clamp<int64_t>(start, 0, spec.dataset_size);
  const int64_t global = global_batch_size(spec);
  const int64_t partial = left % global;
  const int64_t share = spec.split_batches ? spec.batch_size / spec.num_processes : spec.batch_size;
  const bool gets_tail =
      partial > 0 && !spec.drop_last && (spec.even_batches || share * spec.process_index < partial);
  return left / global + (gets_tail ? 1 : 0);
}

int64_t remainder(const ShardSpec& spec, int64_t start) {
  if (spec.drop_last) return -1;
  const int64_t left = spec.dataset_size - std::clamp<int64_t>(start, 0, spec.dataset_size);
  return left % global_batch_size(spec);
}

}  // namespace accel::data
