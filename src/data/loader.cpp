#include "data/loader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <tuple>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "config/keys.hpp"

namespace accel::data {

namespace {

long long int_option(const std::string& key, const std::string& value, long long min,
                     long long max) {
  long long v = 0;
  if (!parse_int(value, &v) || v < min || v > max)
    fail(Errc::invalid_argument, "dataloader option '" + key + "': invalid value '" + value +
                                     "'; allowed: an integer from " + std::to_string(min) + " to " +
                                     std::to_string(max));
  return v;
}

// The loader whose batch the calling thread is producing: a sample callback may use other
// dataloaders, but a call into the one it works for would wait for the callback itself.
thread_local const DataLoader* t_producing_for = nullptr;

struct Producing {
  explicit Producing(const DataLoader* l) : previous(t_producing_for) { t_producing_for = l; }
  ~Producing() { t_producing_for = previous; }
  const DataLoader* previous;
};

bool parse_flag(const std::string& key, const std::string& value) {
  bool b = false;
  if (!config::parse_bool(value, &b))
    fail(Errc::invalid_argument,
         "dataloader option '" + key + "': invalid value '" + value + "'; allowed: true/false");
  return b;
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, LoaderPlace place, LoaderOptions defaults)
    : dataset_(std::move(dataset)), place_(std::move(place)), options_(defaults) {
  dataset_size_ = dataset_ ? dataset_->size() : 0;
  if (dataset_) ragged_ = dataset_->ragged_fields();
  padding_.resize(ragged_.size());
}

DataLoader::~DataLoader() {
  stop_workers();
  if (place_.state) place_.state->end(this);
}

std::unique_lock<std::mutex> DataLoader::enter() const {
  if (in_sample_callback() && t_producing_for == this)
    fail(Errc::state,
         "a dataloader was called from inside its own dataset's sample callback, which the call "
         "would wait for");
  return std::unique_lock<std::mutex>(call_mutex_);
}

void DataLoader::check_open() const {
  if (closed_) fail(Errc::state, "the dataloader is closed");
}

void DataLoader::set_option(const std::string& key, const std::string& value) {
  auto lock = enter();
  check_open();
  LoaderOptions o = options_;
  if (key == "batch_size") {
    o.batch_size = int_option(key, value, 1, int64_t{1} << 40);
  } else if (key == "shuffle") {
    o.shuffle = parse_flag(key, value);
  } else if (key == "seed") {
    o.seed = static_cast<uint64_t>(int_option(key, value, 0, INT64_MAX));
  } else if (key == "drop_last") {
    o.drop_last = parse_flag(key, value);
  } else if (key == "num_workers") {
    o.num_workers = static_cast<int>(int_option(key, value, 0, 256));
  } else if (key == "prefetch_factor") {
    o.prefetch_factor = static_cast<int>(int_option(key, value, 1, 1024));
  } else if (key == "split_batches") {
    o.split_batches = parse_flag(key, value);
  } else if (key == "even_batches") {
    o.even_batches = parse_flag(key, value);
  } else if (key == "device_placement") {
    o.device_placement = parse_flag(key, value);
  } else if (key == "group_by_length") {
    o.group_by_length = parse_flag(key, value);
    if (o.group_by_length && std::find(ragged_.begin(), ragged_.end(), true) == ragged_.end())
      fail(Errc::invalid_argument,
           "group_by_length sorts by the length of the first ragged field, and this dataset has "
           "none");
  } else if (is_padding_option(key)) {
    if (std::find(ragged_.begin(), ragged_.end(), true) == ragged_.end())
      fail(Errc::invalid_argument,
           "dataloader option '" + key + "' pads ragged fields, and this dataset has none");
    std::vector<FieldPadding> padding = padding_;
    for (size_t f = 0; f < ragged_.size(); ++f)
      if (ragged_[f]) set_padding_option(padding[f], key, value);
    end_iteration();
    padding_ = std::move(padding);
    return;
  } else {
    fail(Errc::invalid_argument,
         "unknown dataloader option '" + key +
             "'; known: batch_size, shuffle, seed, drop_last, num_workers, prefetch_factor, "
             "split_batches, even_batches, device_placement, group_by_length, and for ragged "
             "fields pad_value, padding_side, pad_to_multiple_of, max_length, truncation, mask");
  }
  ShardSpec s = spec();
  s.batch_size = o.batch_size;
  s.split_batches = o.split_batches;
  validate(s);  // e.g. split_batches with a batch size that does not divide
  end_iteration();
  options_ = o;
}

void DataLoader::set_field_option(size_t field, const std::string& key, const std::string& value) {
  auto lock = enter();
  check_open();
  if (field >= ragged_.size())
    fail(Errc::invalid_argument, "field " + std::to_string(field) +
                                     " is out of range: the dataset has " +
                                     std::to_string(ragged_.size()) + " fields");
  if (!ragged_[field])
    fail(Errc::invalid_argument, "field " + std::to_string(field) +
                                     " is not ragged: padding options apply to ragged fields only");
  FieldPadding p = padding_[field];
  set_padding_option(p, key, value);
  end_iteration();
  padding_[field] = p;
}

ShardSpec DataLoader::spec() const {
  ShardSpec s;
  s.dataset_size = dataset_size_;
  s.batch_size = options_.batch_size;
  s.num_processes = place_.world_size;
  s.process_index = place_.rank;
  s.split_batches = options_.split_batches;
  // With one process Accelerate does not shard at all: the last batch stays short, unpadded.
  s.even_batches = options_.even_batches && place_.world_size > 1;
  s.drop_last = options_.drop_last;
  return s;
}

size_t DataLoader::num_fields() const {
  auto lock = enter();
  check_open();
  size_t masks = 0;
  for (size_t f = 0; f < ragged_.size(); ++f)
    if (ragged_[f] && padding_[f].mask != PadMask::none) ++masks;
  return dataset_->num_fields() + masks;
}

int64_t DataLoader::length() const {
  auto lock = enter();
  check_open();
  return shard_length(spec(), 0);
}

int64_t DataLoader::epoch() const {
  auto lock = enter();
  check_open();
  return epoch_;
}

bool DataLoader::end_of_dataloader() const {
  auto lock = enter();
  check_open();
  return iterating_ && next_ == plan_.size();
}

int64_t DataLoader::remainder() const {
  auto lock = enter();
  check_open();
  return data::remainder(spec(), iterating_ ? start_ : 0);
}

void DataLoader::set_epoch(int64_t epoch) {
  auto lock = enter();
  check_open();
  end_iteration();
  epoch_ = epoch;
}

void DataLoader::skip_first_batches(int64_t n) {
  auto lock = enter();
  check_open();
  if (n < 0) fail(Errc::invalid_argument, "skip_first_batches: n is negative");
  end_iteration();
  start_ = std::min(dataset_size_, n * global_batch_size(spec()));
}

std::pair<int64_t, int64_t> DataLoader::cursor_locked() const {
  if (!iterating_) return {epoch_, start_};
  const int64_t consumed = start_ + static_cast<int64_t>(next_) * global_batch_size(spec());
  return {epoch_, std::min(consumed, dataset_size_)};
}

std::pair<int64_t, int64_t> DataLoader::position() const {
  auto lock = enter();
  check_open();
  return cursor_locked();
}

std::pair<int64_t, int64_t> DataLoader::checkpoint_cursor() const {
  auto lock = enter();
  return cursor_locked();
}

void DataLoader::check_cursor(int64_t epoch, int64_t samples) const {
  if (epoch < 0 || samples < 0 || samples > dataset_size_)
    fail(Errc::invalid_argument,
         "set_position: epoch " + std::to_string(epoch) + ", samples " + std::to_string(samples) +
             " is not a position in a dataset of " + std::to_string(dataset_size_) + " samples");
}

void DataLoader::set_cursor_locked(int64_t epoch, int64_t samples) {
  check_cursor(epoch, samples);
  end_iteration();
  epoch_ = epoch;
  start_ = samples;
}

void DataLoader::set_position(int64_t epoch, int64_t samples) {
  auto lock = enter();
  check_open();
  set_cursor_locked(epoch, samples);
}

void DataLoader::restore_cursor(int64_t epoch, int64_t samples) {
  auto lock = enter();
  set_cursor_locked(epoch, samples);
}

void DataLoader::close() {
  // Destroyed after the lock is released: the dataset's release callback may run here.
  std::shared_ptr<Dataset> released;
  auto lock = enter();
  if (closed_) return;
  // The cursor stays where the program left it: a checkpoint taken later still records it.
  std::tie(epoch_, start_) = cursor_locked();
  end_iteration();
  closed_ = true;
  released = std::move(dataset_);
}

std::vector<int64_t> DataLoader::epoch_plan_order(const ShardSpec& s) {
  auto order = epoch_order(s.dataset_size, options_.shuffle, options_.seed, epoch_);
  if (!options_.group_by_length) return order;
  if (lengths_.empty() && s.dataset_size > 0) {
    // Once per loader: a sample's length does not change between epochs.
    Producing marked(this);
    std::vector<int64_t> lengths(static_cast<size_t>(s.dataset_size));
    for (int64_t i = 0; i < s.dataset_size; ++i)
      lengths[static_cast<size_t>(i)] = dataset_->sample_length(i);
    lengths_ = std::move(lengths);
  }
  return group_by_length(order, lengths_, global_batch_size(s));
}

void DataLoader::begin_iteration() {
  const ShardSpec s = spec();
  plan_ = shard_batches(s, epoch_plan_order(s), start_);
  next_ = 0;
  iterating_ = true;
  if (place_.state) place_.state->begin(this, data::remainder(s, start_));
  if (options_.num_workers > 0 && !plan_.empty()) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ready_.clear();
      issued_ = 0;
      stop_ = false;
    }
    for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
}

void DataLoader::end_iteration() {
  stop_workers();
  if (iterating_ && place_.state) place_.state->end(this);
  iterating_ = false;
  plan_.clear();
  next_ = 0;
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  // Each worker finishes the sample callback it is in, if any, and gives up its batch.
  for (auto& w : workers_) w.join();
  workers_.clear();
  std::lock_guard<std::mutex> guard(mutex_);
  ready_.clear();
}

std::vector<at::Tensor> DataLoader::produce(size_t k, const std::atomic<bool>* stop) const {
  Producing marked(this);
  auto batch = dataset_->get_batch(plan_[k], padding_, stop);
  // To a GPU through pinned host memory, without blocking: the copy overlaps the host's work
  // and the step that uses the batch is queued behind it on the same stream. The pinned staging
  // block comes from LibTorch's caching host allocator, which reuses it only once the copy that
  // reads it has completed.
  if (options_.device_placement && place_.device != "cpu") {
    const at::Device device(place_.device);
    for (auto& t : batch) {
      if (!t.device().is_cpu()) {
        t = t.to(device);
        continue;
      }
      t = (t.is_pinned() ? t : t.pin_memory()).to(device, /*non_blocking=*/true);
    }
  }
  return batch;
}

void DataLoader::worker_loop() {
  const size_t depth = static_cast<size_t>(options_.num_workers * options_.prefetch_factor);
  for (;;) {
    size_t k;
    {
      std::unique_lock<std::mutex> guard(mutex_);
      cv_.wait(guard, [&] { return stop_ || (issued_ < plan_.size() && issued_ < next_ + depth); });
      if (stop_) return;
      k = issued_++;
    }
    Slot slot;
    try {
      slot.batch = produce(k, &stop_);
    } catch (const Cancelled&) {
      return;
    } catch (...) {
      slot.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ready_[k] = std::move(slot);
    }
    cv_.notify_all();
  }
}

bool DataLoader::next(std::vector<at::Tensor>& out) {
  auto lock = enter();
  check_open();
  if (!iterating_) begin_iteration();
  if (next_ >= plan_.size()) {
    // A whole pass: the epoch advances (Accelerate increments only after a complete pass).
    end_iteration();
    ++epoch_;
    start_ = 0;
    return false;
  }
  Slot slot;
  if (workers_.empty()) {
    try {
      slot.batch = produce(next_, nullptr);
    } catch (...) {
      slot.error = std::current_exception();
    }
  } else {
    std::unique_lock<std::mutex> guard(mutex_);
    cv_.wait(guard, [&] { return ready_.count(next_) > 0; });
    slot = std::move(ready_[next_]);
    ready_.erase(next_);
  }
  if (slot.error) {
    end_iteration();  // the epoch stops here; the next call starts it again from its beginning
    std::rethrow_exception(slot.error);
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ++next_;
  }
  cv_.notify_all();
  if (next_ == plan_.size() && place_.state) place_.state->set_end_of_dataloader(this, true);
  out = std::move(slot.batch);
  return true;
}

}  // namespace accel::data
