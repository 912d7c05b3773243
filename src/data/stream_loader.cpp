#include "data/stream_loader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "common/error.hpp"
#include "common/interrupt.hpp"

namespace accel::data {

StreamIteration::StreamIteration(std::shared_ptr<const StreamDataset> dataset, StreamSpec spec,
                                 std::vector<FieldPadding> padding, int64_t epoch, int64_t start,
                                 int prefetch)
    : dataset_(std::move(dataset)),
      spec_(spec),
      padding_(std::move(padding)),
      start_(start),
      global_(stream_global_batch(spec)),
      reader_(dataset_->open(epoch)),
      prefetch_(prefetch) {
  if (prefetch_ > 0) thread_ = std::thread([this] { reader_loop(); });
}

StreamIteration::~StreamIteration() {
  stopping_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StreamIteration::Chunk StreamIteration::read_chunk() {
  Chunk c;
  try {
    if (!started_) {
      // The first global batch completes the last one, so it is kept even when a resume skips it.
      for (int64_t i = 0; i < global_ && !ended_; ++i) {
        if (stopping()) return c;
        Sample s;
        if (reader_->next(s)) {
          first_.push_back(std::move(s));
          ++position_;
        } else {
          ended_ = true;
        }
      }
      started_ = true;
    }
    Sample dropped;  // a resume reads the positions before it and drops them
    while (position_ < start_ && !ended_) {
      if (stopping()) return c;
      if (reader_->next(dropped))
        ++position_;
      else
        ended_ = true;
    }
    c.begin = std::min(start_, position_);
    const auto first_size = static_cast<int64_t>(first_.size());
    while (static_cast<int64_t>(c.samples.size()) < global_) {
      const int64_t p = c.begin + static_cast<int64_t>(c.samples.size());
      if (p < first_size) {  // still inside the first global batch, which is already read
        c.samples.push_back(first_[static_cast<size_t>(p)]);
        continue;
      }
      if (ended_) break;
      if (stopping()) return c;
      Sample s;
      if (!reader_->next(s)) {
        ended_ = true;
        break;
      }
      ++position_;
      c.samples.push_back(std::move(s));
    }
    start_ = c.begin + static_cast<int64_t>(c.samples.size());
  } catch (...) {
    c.error = std::current_exception();
  }
  return c;
}

void StreamIteration::reader_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> guard(mutex_);
      cv_.wait(guard, [&] { return stop_ || static_cast<int>(queue_.size()) < prefetch_; });
      if (stop_) return;
    }
    Chunk c = read_chunk();
    const bool done = c.error || c.samples.empty();
    {
      std::lock_guard<std::mutex> guard(mutex_);
      queue_.push_back(std::move(c));
    }
    cv_.notify_all();
    if (done) return;
  }
}

StreamIteration::Chunk StreamIteration::fetch() {
  if (prefetch_ == 0) return read_chunk();
  std::unique_lock<std::mutex> guard(mutex_);
  while (!cv_.wait_for(guard, interrupt::kPollSlice, [&] { return !queue_.empty(); }))
    interrupt::check("dataloader next");
  Chunk c = std::move(queue_.front());
  queue_.pop_front();
  guard.unlock();
  cv_.notify_all();
  return c;
}

const Sample& StreamIteration::sample_at(const Chunk& chunk, int64_t position) const {
  if (position >= chunk.begin &&
      position < chunk.begin + static_cast<int64_t>(chunk.samples.size()))
    return chunk.samples[static_cast<size_t>(position - chunk.begin)];
  return first_.at(static_cast<size_t>(position));
}

std::vector<int64_t> StreamIteration::positions(const Chunk& chunk) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < chunk.samples.size(); ++i)
    out.push_back(chunk.begin + static_cast<int64_t>(i));
  return out;
}

std::vector<int64_t> StreamIteration::first_positions() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < first_.size(); ++i) out.push_back(static_cast<int64_t>(i));
  return out;
}

// What this rank (with dispatch: the main process, for every rank) takes of a global batch.
std::vector<int64_t> StreamIteration::rows_of(const Chunk& chunk, bool last, int64_t* share) const {
  if (!spec_.dispatch) return stream_take(spec_, positions(chunk), first_positions(), last);
  auto plan = dispatch_plan(spec_, positions(chunk), first_positions(), last);
  if (share) *share = plan.share;
  return std::move(plan.rows);
}

StreamStep StreamIteration::make_step(const Chunk& chunk, bool last) const {
  StreamStep step;
  const std::vector<int64_t> rows = rows_of(chunk, last, &step.share);
  std::vector<const Sample*> samples;
  for (int64_t p : rows) samples.push_back(&sample_at(chunk, p));
  step.fields = collate(samples, rows, dataset_->specs(), padding_);
  step.last = last;
  step.kept = static_cast<int64_t>(stream_kept(spec_, positions(chunk)).size());
  step.consumed = chunk.begin + static_cast<int64_t>(chunk.samples.size());
  return step;
}

std::optional<StreamStep> StreamIteration::next() {
  if (deferred_) std::rethrow_exception(std::exchange(deferred_, nullptr));
  if (finished_) return std::nullopt;
  Chunk current = ahead_ ? std::move(*ahead_) : fetch();
  ahead_.reset();
  if (current.error) std::rethrow_exception(current.error);
  // A global batch that gives no rank anything is dropped (drop_last); only the last one can be.
  auto dropped = [&](const Chunk& c) { return rows_of(c, true, nullptr).empty(); };
  if (current.samples.empty() || dropped(current)) {
    finished_ = true;
    return std::nullopt;
  }
  // One global batch ahead, so that the last one is known before it is handed out. A failure
  // there does not take this batch with it: it is thrown by the next call.
  Chunk next = fetch();
  bool last;
  if (next.error) {
    deferred_ = next.error;
    last = false;
  } else {
    last = next.samples.empty() || dropped(next);
    if (!last) ahead_ = std::move(next);
  }
  finished_ = last;
  return make_step(current, last);
}

}  // namespace accel::data
