// How a stream of unknown length is shared out, as pure index maths over the stream's positions
// (0, 1, 2, ... within an epoch): Accelerate's two semantics.
//
//  - IterableDatasetShard (dispatch_batches false): every rank reads the whole stream in global
//    batches (batch_size x P, or batch_size when split) and takes its slice of each. The short last
//    global batch is dropped with drop_last, else completed with the epoch's first global batch
//    (on one process, which Accelerate does not shard, it stays short).
//  - DataLoaderDispatcher (dispatch_batches true): the main process reads P batches of batch_size
//    (one when split), concatenated, and every rank takes rows / P of them. The short last one is
//    dropped with drop_last (only a complete round is sent), else its rows are completed, when P
//    does not divide them, with the first P rows of the epoch's first global batch, one row more
//    per rank.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace accel::data {

struct StreamSpec {
  int64_t batch_size = 1;  // per rank, or the global batch when split
  int num_processes = 1;
  int process_index = 0;
  bool split_batches = false;
  bool drop_last = false;
  bool dispatch = false;
};

// Positions one global batch holds when the stream does not end inside it.
int64_t stream_global_batch(const StreamSpec& spec);

// What a rank takes of one global batch read from the stream. `batch` is the positions read
// (stream_global_batch of them, fewer only when the stream ended inside it), `first` the positions
// of the epoch's first global batch as read, `last` whether the stream has nothing after `batch`.
// Returns the positions of this rank's batch in order (repeats allowed), or an empty vector when
// the rank gets nothing (the global batch is dropped).
std::vector<int64_t> stream_take(const StreamSpec& spec, const std::vector<int64_t>& batch,
                                 const std::vector<int64_t>& first, bool last);

// With dispatch: the global batch the main process sends (its kept rows, completed as the last
// one needs) and how many rows each rank takes: rank r takes rows [r * share, (r + 1) * share),
// cut at the end. Empty `rows` when the batch is dropped.
struct DispatchPlan {
  std::vector<int64_t> rows;
  int64_t share = 0;
};
DispatchPlan dispatch_plan(const StreamSpec& spec, const std::vector<int64_t>& batch,
                           const std::vector<int64_t>& first, bool last);

// Rank `rank`'s rows [begin, end) of a dispatched global batch of `size` rows.
std::pair<int64_t, int64_t> dispatch_rows(int64_t size, int64_t share, int rank);

// The positions of `batch` a global batch really holds before stream_take completes it: what
// Accelerate's dispatcher reports as `remainder` for the last one. Dispatch with drop_last sends
// complete rounds only: a short global batch holds nothing.
std::vector<int64_t> stream_kept(const StreamSpec& spec, const std::vector<int64_t>& batch);

// Every rank's batches over a stream of `n` positions, as the loader takes them (tests and tools).
std::vector<std::vector<int64_t>> stream_epoch(const StreamSpec& spec, int64_t n);

}  // namespace accel::data
