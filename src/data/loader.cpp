#include "data/loader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <tuple>

#include "common/error.hpp"
#include "common/interrupt.hpp"
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
  stream_dataset_ = std::dynamic_pointer_cast<const StreamDataset>(dataset_);
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
  } else if (key == "dispatch_batches") {
    o.dispatch_batches = value == "auto" ? -1 : parse_flag(key, value) ? 1 : 0;
    if (o.dispatch_batches == 1 && !stream_dataset_)
      fail(Errc::unsupported,
           "dispatch_batches: libaccel dispatches streams only (accel_dataset_from_stream); a "
           "dataset of known length is sharded by index on every process");
  } else if (key == "shard") {
    o.shard = parse_flag(key, value);
  } else if (key == "group_by_length") {
    o.group_by_length = parse_flag(key, value);
    if (o.group_by_length && stream_dataset_)
      fail(Errc::unsupported,
           "group_by_length sorts the whole epoch by length, and a stream has no known length");
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
             "split_batches, even_batches, device_placement, group_by_length, dispatch_batches, "
             "shard, "
             "and for ragged "
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
  s.dataset_size = std::max<int64_t>(dataset_size_, 0);  // a stream's is unknown (-1)
  s.batch_size = options_.batch_size;
  s.num_processes = processes();
  s.process_index = options_.shard ? place_.rank : 0;
  s.split_batches = options_.split_batches;
  // With one process Accelerate does not shard at all: the last batch stays short, unpadded.
  s.even_batches = options_.even_batches && processes() > 1;
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

bool DataLoader::even_batches() const {
  auto lock = enter();
  return options_.even_batches;
}

bool DataLoader::set_even_batches_keeping_position(bool even) {
  auto lock = enter();
  if (closed_) return false;
  if (options_.even_batches == even) return true;
  if (iterating_) {
    const auto [epoch, consumed] = cursor_locked();
    end_iteration();
    epoch_ = epoch;
    start_ = consumed;
  }
  options_.even_batches = even;
  return true;
}

int64_t DataLoader::length() const {
  auto lock = enter();
  check_open();
  return stream_dataset_ ? -1 : shard_length(spec(), 0);
}

int64_t DataLoader::batch_size() const {
  auto lock = enter();
  return options_.batch_size;
}

int64_t DataLoader::epoch() const {
  auto lock = enter();
  check_open();
  return epoch_;
}

bool DataLoader::end_of_dataloader() const {
  auto lock = enter();
  check_open();
  if (stream_dataset_) return iterating_ && stream_last_;
  return iterating_ && next_ == plan_.size();
}

int64_t DataLoader::remainder() const {
  auto lock = enter();
  check_open();
  if (stream_dataset_) return iterating_ && stream_last_ ? stream_kept_ : -1;
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
  const int64_t skipped = n * global_batch_size(spec());
  start_ = stream_dataset_ ? skipped : std::min(dataset_size_, skipped);
}

std::pair<int64_t, int64_t> DataLoader::cursor_locked() const {
  if (!iterating_) return {epoch_, start_};
  if (stream_dataset_) return {epoch_, stream_consumed_};
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
  if (stream_dataset_ && epoch >= 0 && samples >= 0) return;  // a stream's length is unknown
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
  if (stream_dataset_) {
    // Only the main process reads a dispatched stream; the others receive its batches.
    if (!dispatching() || place_.rank == 0)
      stream_ = std::make_unique<StreamIteration>(
          stream_dataset_, stream_spec(), padding_, epoch_, start_,
          options_.num_workers > 0 ? options_.num_workers * options_.prefetch_factor : 0);
    stream_consumed_ = start_;
    stream_last_ = false;
    stream_kept_ = -1;
    iterating_ = true;
    if (tracked()) place_.state->begin(this, -1);
    return;
  }
  const ShardSpec s = spec();
  plan_ = shard_batches(s, epoch_plan_order(s), start_);
  next_ = 0;
  iterating_ = true;
  if (tracked()) place_.state->begin(this, data::remainder(s, start_));
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
  stream_.reset();  // stops its reading thread
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
  place_on_device(batch);
  return batch;
}

void DataLoader::place_on_device(std::vector<at::Tensor>& batch) const {
  // To a GPU through pinned host memory, without blocking: the copy overlaps the host's work
  // and the step that uses the batch is queued behind it on the same stream. The pinned staging
  // block comes from LibTorch's caching host allocator, which reuses it only once the copy that
  // reads it has completed.
  if (!options_.device_placement || place_.device == "cpu") return;
  const at::Device device(place_.device);
  for (auto& t : batch) {
    if (!t.device().is_cpu()) {
      t = t.to(device);
      continue;
    }
    t = (t.is_pinned() ? t : t.pin_memory()).to(device, /*non_blocking=*/true);
  }
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
  if (stream_dataset_) return next_stream(out);
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
    // In slices: the program may interrupt a wait for a slow worker (what it waited for stays).
    while (!cv_.wait_for(guard, interrupt::kPollSlice, [&] { return ready_.count(next_) > 0; }))
      interrupt::check("dataloader next");
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
  if (next_ == plan_.size() && tracked()) place_.state->set_end_of_dataloader(this, true);
  out = std::move(slot.batch);
  return true;
}

bool DataLoader::tracked() const {
  // An unsharded loader pads nothing, so gather_for_metrics has nothing of it to drop (and an
  // unprepared PyTorch DataLoader is not in Accelerate's GradientState either).
  return place_.state && options_.shard;
}

int DataLoader::processes() const {
  return options_.shard ? place_.world_size : 1;
}

bool DataLoader::dispatching() const {
  const bool on = options_.dispatch_batches < 0 ? true : options_.dispatch_batches == 1;
  return stream_dataset_ && on && processes() > 1;
}

StreamSpec DataLoader::stream_spec() const {
  StreamSpec s;
  s.batch_size = options_.batch_size;
  s.num_processes = processes();
  s.process_index = options_.shard ? place_.rank : 0;
  s.split_batches = options_.split_batches;
  s.drop_last = options_.drop_last;
  s.dispatch = dispatching();
  return s;
}

bool DataLoader::next_stream(std::vector<at::Tensor>& out) {
  if (!iterating_) begin_iteration();
  std::optional<StreamStep> step;
  try {
    Producing marked(this);
    step = dispatching() ? dispatch_step() : stream_->next();
  } catch (...) {
    // What the program was given stays consumed: the next call reads the stream again from its
    // start up to there and goes on.
    start_ = stream_consumed_;
    end_iteration();
    throw;
  }
  if (!step) {
    end_iteration();
    ++epoch_;
    start_ = 0;
    return false;
  }
  stream_consumed_ = step->consumed;
  stream_last_ = step->last;
  stream_kept_ = step->kept;
  if (step->last && tracked()) {
    place_.state->set_end_of_dataloader(this, true);
    place_.state->set_remainder(this, step->kept);
  }
  if (dispatching()) {
    const auto rows = step->fields.empty() ? 0 : step->fields.front().size(0);
    const auto [begin, end] = dispatch_rows(rows, step->share, place_.rank);
    for (auto& t : step->fields) t = t.narrow(0, begin, end - begin).contiguous();
  }
  out = std::move(step->fields);
  place_on_device(out);
  return true;
}

std::optional<StreamStep> DataLoader::dispatch_step() {
  if (!place_.broadcast) fail(Errc::internal, "a dispatching dataloader has no way to broadcast");
  // info: status (0 a batch, 1 the end, 2 a failure), share, last, kept, consumed, field count.
  std::vector<int64_t> info(6, 0);
  std::vector<at::Tensor> fields;
  std::string message;
  std::exception_ptr error;
  if (place_.rank == 0) {
    std::optional<StreamStep> step;
    try {
      step = stream_->next();
    } catch (const std::exception& e) {
      error = std::current_exception();
      message = e.what();
    } catch (...) {
      error = std::current_exception();
      message = "an unknown failure";
    }
    if (error) {
      info[0] = 2;
    } else if (!step) {
      info[0] = 1;
    } else {
      info = {0,          step->share,    step->last ? 1 : 0,
              step->kept, step->consumed, static_cast<int64_t>(step->fields.size())};
      fields = std::move(step->fields);
    }
  }
  place_.broadcast(info, fields, message);  // every rank, also when the main process failed
  if (error) std::rethrow_exception(error);
  if (info[0] == 2) fail(Errc::callback, "the main process could not read the stream: " + message);
  if (info[0] == 1) return std::nullopt;
  StreamStep step;
  step.share = info[1];
  step.last = info[2] != 0;
  step.kept = info[3];
  step.consumed = info[4];
  step.fields = std::move(fields);
  return step;
}

}  // namespace accel::data
