// The data loader: this rank's shard of each global batch, collated, prefetched on worker threads
// and already on the rank's device when asked for; Accelerate's epoch, end_of_dataloader and
// remainder semantics; a global sample cursor for exact resume.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.hpp"
#include "data/shard.hpp"
#include "data/stream_loader.hpp"
#include "runtime/gradient_state.hpp"

namespace accel::data {

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  int num_workers = 0;      // 0: batches are made in the caller's thread, on demand
  int prefetch_factor = 2;  // batches in flight per worker
  bool split_batches = false;
  bool even_batches = true;
  bool device_placement = true;
  bool group_by_length = false;  // batches of similar lengths (Hugging Face's group_by_length)
  int dispatch_batches = -1;     // streams: -1 auto (on for a stream, as Accelerate), 0 off, 1 on
  bool shard = true;             // false: this process reads every batch (data split beforehand)
};

struct LoaderPlace {
  int rank = 0;
  int world_size = 1;
  std::string device = "cpu";
  std::shared_ptr<runtime::GradientState> state;
  // A collective from the main process to every rank, for dispatch_batches: `info` (its size is
  // the same everywhere), `fields` (any shapes) and `message` travel from rank 0. Unset in a world
  // of one.
  std::function<void(std::vector<int64_t>& info, std::vector<at::Tensor>& fields,
                     std::string& message)>
      broadcast;
};

// Thread rules: every public function takes the loader's own lock, so calls from several threads
// run one after the other; none may be made from inside a sample callback producing a batch for
// this loader (accel::Error(state)): it would wait for that callback.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, LoaderPlace place, LoaderOptions defaults = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Options by key (batch_size, shuffle, seed, drop_last, num_workers, prefetch_factor,
  // split_batches, even_batches, device_placement, group_by_length; a padding option sets it for
  // every ragged field). Ends an iteration in progress.
  void set_option(const std::string& key, const std::string& value);
  // A padding option (padding.hpp) of one ragged field. Ends an iteration in progress.
  void set_field_option(size_t field, const std::string& key, const std::string& value);

  // The next batch of the current epoch, starting one when none is in progress. Returns false once
  // at the end of each epoch; the call after that starts the next epoch.
  bool next(std::vector<at::Tensor>& out);

  // The dataset's fields, then one mask per ragged field whose padding asks for one.
  size_t num_fields() const;
  bool is_stream() const { return stream_dataset_ != nullptr; }
  bool even_batches() const;
  // even_batches for join_uneven_inputs: an iteration in progress goes on from its cursor with the
  // new setting (set_option would end it). False, changing nothing, when the loader is closed.
  bool set_even_batches_keeping_position(bool even);
  // Batches this rank gets in a whole epoch.
  int64_t length() const;
  int64_t epoch() const;
  // The epoch the next iteration uses (its shuffle); ends an iteration in progress.
  void set_epoch(int64_t epoch);
  // True while the last batch of the epoch is in use.
  bool end_of_dataloader() const;
  // Real samples in the last global step (-1 with drop_last), as Accelerate's `remainder`.
  int64_t remainder() const;
  // The next iteration skips this rank's first n batches (n global steps).
  void skip_first_batches(int64_t n);
  // (epoch, samples of that epoch consumed over all ranks): where a resumed run continues.
  std::pair<int64_t, int64_t> position() const;
  // Continue at `samples` into `epoch`, even on another number of processes.
  void set_position(int64_t epoch, int64_t samples);
  // Stops the workers (waiting for the samples they are producing, one each at most) and releases
  // the dataset; later calls fail with accel::Error(state). Idempotent.
  void close();

  // For checkpoints, also once closed: the cursor (frozen at close), and restoring one.
  std::pair<int64_t, int64_t> checkpoint_cursor() const;
  void restore_cursor(int64_t epoch, int64_t samples);
  // Throws accel::Error(invalid_argument) unless restore_cursor(epoch, samples) would succeed.
  void check_cursor(int64_t epoch, int64_t samples) const;
  // This process's batch size (the option; with split_batches the global one).
  int64_t batch_size() const;

 private:
  ShardSpec spec() const;
  int64_t dataset_size() const;
  std::pair<int64_t, int64_t> cursor_locked() const;
  void set_cursor_locked(int64_t epoch, int64_t samples);
  void begin_iteration();
  void end_iteration();
  void stop_workers();
  void worker_loop();
  std::vector<at::Tensor> produce(size_t k, const std::atomic<bool>* stop) const;
  void place_on_device(std::vector<at::Tensor>& batch) const;
  // Streams (stream_loader.hpp): one pass, and with dispatch_batches the main process's batch
  // sent to every rank.
  bool dispatching() const;
  int processes() const;  // the processes the batches are shared between
  bool tracked() const;   // its iterations are in the accelerator's GradientState
  StreamSpec stream_spec() const;
  bool next_stream(std::vector<at::Tensor>& out);
  std::optional<StreamStep> dispatch_step();
  std::vector<int64_t> epoch_plan_order(const ShardSpec& s);
  // Takes the call lock after checking the caller is allowed in; throws accel::Error(state).
  std::unique_lock<std::mutex> enter() const;
  void check_open() const;

  mutable std::mutex call_mutex_;  // held for every public call: one call at a time
  std::shared_ptr<Dataset> dataset_;
  int64_t dataset_size_ = 0;
  LoaderPlace place_;
  LoaderOptions options_;
  std::vector<bool> ragged_;
  std::vector<FieldPadding> padding_;  // one per dataset field; used for the ragged ones
  std::vector<int64_t> lengths_;       // every sample's length, once length grouping needs them
  std::shared_ptr<const StreamDataset> stream_dataset_;  // set when the dataset is a stream
  std::unique_ptr<StreamIteration> stream_;  // the pass in progress (none on non-main ranks when
                                             // dispatching: they receive)
  int64_t stream_consumed_ = 0;              // stream positions behind the batches handed out
  bool stream_last_ = false;                 // the batch in use is the epoch's last
  int64_t stream_kept_ = -1;                 // real samples of that last global batch
  bool closed_ = false;

  int64_t epoch_ = 0;
  int64_t start_ = 0;  // samples of the epoch already consumed when the iteration began
  bool iterating_ = false;
  std::vector<std::vector<int64_t>> plan_;
  size_t next_ = 0;

  // Shared with the worker threads, under mutex_.
  struct Slot {
    std::vector<at::Tensor> batch;
    std::exception_ptr error;
  };
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<size_t, Slot> ready_;
  size_t issued_ = 0;
  std::atomic<bool> stop_{false};  // read between samples by the dataset, without mutex_
  std::vector<std::thread> workers_;
};

}  // namespace accel::data
