// Which samples each rank gets: Accelerate's BatchSamplerShard rules, as pure index maths (no
// LibTorch), plus the epoch permutation every rank computes alike without communicating.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::data {

struct ShardSpec {
  int64_t dataset_size = 0;
  // Per rank, or with split_batches the global batch that is cut into num_processes slices.
  int64_t batch_size = 1;
  int num_processes = 1;
  int process_index = 0;
  bool split_batches = false;
  bool even_batches = true;
  bool drop_last = false;
};

// Throws accel::Error(invalid_argument) for a batch size < 1, a rank out of range, or (with
// split_batches) a batch size that does not divide by the number of processes.
void validate(const ShardSpec& spec);

// Samples one global step consumes over all ranks: batch_size * num_processes, or batch_size when
// the batches are split.
int64_t global_batch_size(const ShardSpec& spec);

// The epoch's sample order: 0..n-1, or with `shuffle` a permutation that is a function of
// (seed, epoch) alone, so it is the same on every rank and for every number of processes.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

// Hugging Face's length grouping (transformers' get_length_grouped_indices) over `order`: cut into
// megabatches of m global batches (m = n / (4 * global_batch), at most 50, at least 1), each sorted
// by `lengths` longest first (ties keep their order), and the longest megabatch's head swapped to
// the very front so that the largest batch comes first. Sized by the global batch, so the global
// batches are the same for every number of processes. `lengths[i]` is sample i's length.
std::vector<int64_t> group_by_length(const std::vector<int64_t>& order,
                                     const std::vector<int64_t>& lengths, int64_t global_batch);

// The index batches this rank gets from `order`, resuming after the first `start` samples of it
// (0 for a fresh epoch). With start 0 these are exactly Accelerate's: global batch i goes to rank
// i mod P; with even_batches the last round is completed with samples from the start of the epoch;
// with drop_last an incomplete round is dropped; with split_batches each global batch is cut into P
// contiguous slices.
std::vector<std::vector<int64_t>> shard_batches(const ShardSpec& spec,
                                                const std::vector<int64_t>& order, int64_t start);

// The number of batches shard_batches() returns, without building them.
int64_t shard_length(const ShardSpec& spec, int64_t start);

// How many samples of the last global step are real (not padding), or -1 when drop_last is set
// (Accelerate's `remainder`: dataset length mod global batch size). 0 means the last step is full.
int64_t remainder(const ShardSpec& spec, int64_t start);

}  // namespace accel::data
