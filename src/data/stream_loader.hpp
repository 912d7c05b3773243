// One pass of a dataloader over a stream: reads the stream in global batches (on a thread of its
// own when prefetching), keeps the epoch's first global batch for completing the last one, and
// makes this rank's batch, or with dispatch the main process's whole global batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/collate.hpp"
#include "data/stream.hpp"
#include "data/stream_shard.hpp"

namespace accel::data {

struct StreamStep {
  // This rank's batch; with dispatch (main process) the whole global batch, which rank r slices
  // with dispatch_rows(rows, share, r).
  std::vector<at::Tensor> fields;
  int64_t share = 0;
  bool last = false;     // nothing follows in this epoch
  int64_t kept = 0;      // real samples of the global batch (Accelerate's remainder when last)
  int64_t consumed = 0;  // stream positions read through this global batch
};

class StreamIteration {
 public:
  // Starts `start` positions into epoch `epoch`. `prefetch` > 0 reads ahead on a thread of its own
  // up to that many global batches; 0 reads on the caller's thread when asked.
  StreamIteration(std::shared_ptr<const StreamDataset> dataset, StreamSpec spec,
                  std::vector<FieldPadding> padding, int64_t epoch, int64_t start, int prefetch);
  ~StreamIteration();
  StreamIteration(const StreamIteration&) = delete;
  StreamIteration& operator=(const StreamIteration&) = delete;

  // The next step, or nothing at the end of the epoch. Throws what reading the stream threw; a
  // failure while looking ahead is thrown by the call after the batch before it.
  std::optional<StreamStep> next();

 private:
  struct Chunk {
    std::vector<Sample> samples;
    int64_t begin = 0;  // stream position of samples[0]
    std::exception_ptr error;
  };
  Chunk read_chunk();
  Chunk fetch();  // the next chunk, from the reading thread or read now
  void reader_loop();
  StreamStep make_step(const Chunk& chunk, bool last) const;
  static std::vector<int64_t> positions(const Chunk& chunk);
  std::vector<int64_t> first_positions() const;
  std::vector<int64_t> rows_of(const Chunk& chunk, bool last, int64_t* share) const;
  const Sample& sample_at(const Chunk& chunk, int64_t position) const;

  std::shared_ptr<const StreamDataset> dataset_;
  StreamSpec spec_;
  std::vector<FieldPadding> padding_;
  int64_t start_;
  int64_t global_;
  std::unique_ptr<StreamReader> reader_;
  int64_t position_ = 0;  // next stream position the reader gives
  bool ended_ = false;
  std::vector<Sample> first_;  // the epoch's first global batch (positions 0..)
  bool started_ = false;       // first_ read and the skip done
  std::optional<Chunk> ahead_;
  std::exception_ptr deferred_;
  bool finished_ = false;  // the last batch was handed out

  // The reading thread (prefetch > 0) and its queue, under mutex_.
  int prefetch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  bool stop_ = false;
  // Read between samples without mutex_: stopping waits for one sample callback at most.
  std::atomic<bool> stopping_{false};
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  std::thread thread_;
};

}  // namespace accel::data
