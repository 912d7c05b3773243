#include "runtime/shm_reduce.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "common/parse.hpp"

namespace accel::runtime {

namespace {

constexpr uint64_t kMagic = 0x3163637273636361ULL;  // "accshcc1"
constexpr size_t kPage = 4096;
constexpr size_t kControlStride = 128;  // per rank: arrive word, pid; done word on its own line
constexpr size_t kDoneOffset = 64;
constexpr size_t kPidOffset = 8;

struct Header {
  uint64_t magic;
  uint64_t token;
  uint64_t slot_bytes;
  uint32_t world;
};

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t control_bytes(int world) {
  return round_up(static_cast<size_t>(world) * kControlStride, kPage);
}

size_t segment_bytes(int world, size_t slot_bytes) {
  return kPage + control_bytes(world) + static_cast<size_t>(world) * slot_bytes;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

// Shared (not process-private) futexes: the words live in a mapping shared between processes.
void futex_wait(uint32_t* word, uint32_t seen, std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000) * 1000;
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake_all(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

int open_pidfd(pid_t pid) {
#if defined(SYS_pidfd_open)
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

template <class T, class Op>
void combine(T* out, unsigned char* const* slots, int world, size_t n, Op op) {
  const T* a = reinterpret_cast<const T*>(slots[0]);
  const T* b = reinterpret_cast<const T*>(slots[1]);
  for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  for (int r = 2; r < world; ++r) {
    const T* c = reinterpret_cast<const T*>(slots[r]);
    for (size_t i = 0; i < n; ++i) out[i] = op(out[i], c[i]);
  }
}

// The sum in rank order, divided as the last rank's slot is added: one pass over the data for two
// ranks, and bitwise what summing and then dividing by `world` gives. For a power of two the
// division is a multiplication by its exact reciprocal (same result; a divide costs as much as
// the memory traffic here).
template <class T, class Scale>
void average_with(T* out, unsigned char* const* slots, int world, size_t n, Scale scale) {
  const T* a = reinterpret_cast<const T*>(slots[0]);
  const T* b = reinterpret_cast<const T*>(slots[1]);
  if (world == 2) {
    for (size_t i = 0; i < n; ++i) out[i] = scale(a[i] + b[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  for (int r = 2; r + 1 < world; ++r) {
    const T* c = reinterpret_cast<const T*>(slots[r]);
    for (size_t i = 0; i < n; ++i) out[i] += c[i];
  }
  const T* last = reinterpret_cast<const T*>(slots[world - 1]);
  for (size_t i = 0; i < n; ++i) out[i] = scale(out[i] + last[i]);
}

template <class T>
void average(T* out, unsigned char* const* slots, int world, size_t n) {
  const T w = static_cast<T>(world);
  if ((world & (world - 1)) == 0) {
    const T inverse = T(1) / w;
    average_with<T>(out, slots, world, n, [inverse](T x) { return x * inverse; });
  } else {
    average_with<T>(out, slots, world, n, [w](T x) { return x / w; });
  }
}

template <class T>
void combine_op(T* out, unsigned char* const* slots, int world, size_t n, ShmOp op) {
  switch (op) {
    case ShmOp::kAvg:
      average<T>(out, slots, world, n);
      break;
    case ShmOp::kSum:
      combine<T>(out, slots, world, n, [](T x, T y) { return x + y; });
      break;
    case ShmOp::kMax:
      combine<T>(out, slots, world, n, [](T x, T y) { return y > x ? y : x; });
      break;
    case ShmOp::kMin:
      combine<T>(out, slots, world, n, [](T x, T y) { return y < x ? y : x; });
      break;
  }
}

size_t type_size(ShmType type) {
  switch (type) {
    case ShmType::kF32:
    case ShmType::kI32:
      return 4;
    case ShmType::kF64:
    case ShmType::kI64:
      return 8;
  }
  return 0;
}

// `n` elements of every rank's `slots` combined in rank order into `out`.
void combine_typed(void* out, unsigned char* const* slots, int world, size_t n, ShmType type,
                   ShmOp op) {
  switch (type) {
    case ShmType::kF32:
      combine_op(static_cast<float*>(out), slots, world, n, op);
      break;
    case ShmType::kF64:
      combine_op(static_cast<double*>(out), slots, world, n, op);
      break;
    case ShmType::kI32:
      combine_op(static_cast<int32_t*>(out), slots, world, n, op);
      break;
    case ShmType::kI64:
      combine_op(static_cast<int64_t*>(out), slots, world, n, op);
      break;
  }
}

// Where rank `r`'s part of `count` elements starts: parts of about count / world, on 64-byte
// boundaries so that no two ranks write one cache line.
size_t part_start(size_t count, int r, int world, size_t elem) {
  if (r >= world) return count;
  const size_t line = std::max<size_t>(64 / elem, 1);
  const size_t at = count * static_cast<size_t>(r) / static_cast<size_t>(world);
  return std::min(count, (at + line - 1) / line * line);
}

}  // namespace

size_t ShmReduce::default_slot_bytes(int world) {
  const size_t share = (size_t{32} << 20) / static_cast<size_t>(std::max(world, 1));
  return round_up(std::clamp(share, size_t{1} << 20, size_t{8} << 20), kPage);
}

void ShmReduce::map(SharedBuffer segment, int rank, int world, size_t slot_bytes) {
  segment_ = std::move(segment);
  base_ = segment_.data();
  rank_ = rank;
  world_ = world;
  slot_bytes_ = slot_bytes;
}

ShmReduce ShmReduce::create(const std::string& name, int world, size_t slot_bytes, uint64_t token) {
  if (world < 2 || slot_bytes % kPage != 0 || slot_bytes == 0)
    fail(Errc::invalid_argument, "shared-memory all-reduce needs 2+ ranks and page-sized slots");
  ShmReduce shm;
  shm.map(SharedBuffer::create(name, segment_bytes(world, slot_bytes)), 0, world, slot_bytes);
  auto* header = reinterpret_cast<Header*>(shm.base_);
  header->token = token;
  header->slot_bytes = slot_bytes;
  header->world = static_cast<uint32_t>(world);
  __atomic_store_n(&header->magic, kMagic, __ATOMIC_RELEASE);
  return shm;
}

ShmReduce ShmReduce::attach(const std::string& name, int rank, int world, size_t slot_bytes,
                            uint64_t token) {
  ShmReduce shm;
  shm.map(SharedBuffer::attach(name, segment_bytes(world, slot_bytes)), rank, world, slot_bytes);
  const auto* header = reinterpret_cast<const Header*>(shm.base_);
  if (__atomic_load_n(&header->magic, __ATOMIC_ACQUIRE) != kMagic || header->token != token ||
      header->world != static_cast<uint32_t>(world) || header->slot_bytes != slot_bytes)
    fail(Errc::io, "shared-memory segment " + name +
                       " is not this job's (another container's "
                       "/dev/shm?)");
  return shm;
}

void ShmReduce::publish_pid() {
  auto* pid = reinterpret_cast<int32_t*>(base_ + kPage + rank_ * kControlStride + kPidOffset);
  __atomic_store_n(pid, static_cast<int32_t>(getpid()), __ATOMIC_RELEASE);
}

void ShmReduce::unlink(const std::string& name) {
  SharedBuffer::unlink(name);
}

void ShmReduce::watch_peers() {
  pidfds_.assign(world_, -1);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const auto* pid =
        reinterpret_cast<const int32_t*>(base_ + kPage + r * kControlStride + kPidOffset);
    const int32_t p = __atomic_load_n(pid, __ATOMIC_ACQUIRE);
    if (p > 0) pidfds_[r] = open_pidfd(p);
  }
}

ShmReduce::ShmReduce(ShmReduce&& other) noexcept {
  *this = std::move(other);
}

ShmReduce& ShmReduce::operator=(ShmReduce&& other) noexcept {
  std::swap(segment_, other.segment_);
  std::swap(base_, other.base_);
  std::swap(slot_bytes_, other.slot_bytes_);
  std::swap(rank_, other.rank_);
  std::swap(world_, other.world_);
  std::swap(round_, other.round_);
  std::swap(pidfds_, other.pidfds_);
  return *this;
}

ShmReduce::~ShmReduce() {
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
}

uint32_t* ShmReduce::arrive_word(int r) const {
  return reinterpret_cast<uint32_t*>(base_ + kPage + r * kControlStride);
}

uint32_t* ShmReduce::done_word(int r) const {
  return reinterpret_cast<uint32_t*>(base_ + kPage + r * kControlStride + kDoneOffset);
}

unsigned char* ShmReduce::slot(int r) const {
  return base_ + kPage + control_bytes(world_) + static_cast<size_t>(r) * slot_bytes_;
}

void ShmReduce::publish(uint32_t* word, uint32_t value) {
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
  futex_wake_all(word);
}

void ShmReduce::wait_all(bool arrivals, uint32_t target,
                         std::chrono::steady_clock::time_point deadline,
                         std::chrono::milliseconds timeout, const char* what) {
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    uint32_t* word = arrivals ? arrive_word(r) : done_word(r);
    // Spin briefly (the peer is usually a few microseconds away), then sleep on the futex.
    for (int i = 0; i < 2000 && !reached(__atomic_load_n(word, __ATOMIC_ACQUIRE), target); ++i)
      cpu_relax();
    auto next_check = std::chrono::steady_clock::now();
    for (;;) {
      const uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
      if (reached(seen, target)) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(20);
        bool dead = false;
        if (!pidfds_.empty() && pidfds_[r] >= 0) {
          pollfd pfd{pidfds_[r], POLLIN, 0};
          dead = poll(&pfd, 1, 0) > 0;
        } else {
          const auto* pid =
              reinterpret_cast<const int32_t*>(base_ + kPage + r * kControlStride + kPidOffset);
          dead = kill(__atomic_load_n(pid, __ATOMIC_ACQUIRE), 0) != 0 && errno == ESRCH;
        }
        if (dead)
          fail(Errc::peer_failed,
               "rank " + std::to_string(r) + " exited during a shared-memory " + what);
        interrupt::check("a shared-memory ", what);
        if (now >= deadline) {
          std::string missing;
          for (int q = 0; q < world_; ++q) {
            if (q == rank_) continue;
            uint32_t* w = arrivals ? arrive_word(q) : done_word(q);
            if (!reached(__atomic_load_n(w, __ATOMIC_ACQUIRE), target))
              missing += (missing.empty() ? "" : ", ") + std::to_string(q);
          }
          fail(Errc::timeout, "timed out after " + format_real(timeout.count() / 1000.0) +
                                  " s waiting for rank(s) " + missing + " in a shared-memory " +
                                  what);
        }
      }
      futex_wait(word, seen, std::chrono::microseconds(2000));
    }
  }
}

// One round of the slot protocol: this rank's `bytes` into its slot once every rank has read the
// previous round, then `use` (reading any rank's slot) once every rank has written this one.
template <class Use>
void ShmReduce::exchange_round(const void* mine, size_t bytes,
                               std::chrono::steady_clock::time_point deadline,
                               std::chrono::milliseconds timeout, const char* what, Use&& use) {
  const uint32_t round = ++round_;
  wait_all(false, round - 1, deadline, timeout, what);
  if (bytes > 0) std::memcpy(slot(rank_), mine, bytes);
  publish(arrive_word(rank_), round);
  wait_all(true, round, deadline, timeout, what);
  use();
  publish(done_word(rank_), round);
}

void ShmReduce::all_reduce(void* data, size_t count, ShmType type, ShmOp op,
                           std::chrono::milliseconds timeout, const std::vector<Range>* only) {
  const size_t elem = type_size(type);
  const size_t per_round = slot_bytes_ / elem;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<unsigned char*> slots(world_);
  auto* bytes = static_cast<unsigned char*>(data);
  // Combines elements [from, from + n) of this round (which starts at element `done`).
  auto combine_range = [&](size_t done, size_t from, size_t n) {
    for (int r = 0; r < world_; ++r) slots[r] = slot(r) + (from - done) * elem;
    combine_typed(bytes + from * elem, slots.data(), world_, n, type, op);
  };
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(per_round, count - done);
    exchange_round(bytes + done * elem, n * elem, deadline, timeout, "all-reduce", [&] {
      // Every rank combines the slots in rank order, so all get bitwise the same result.
      if (!only) {
        combine_range(done, done, n);
      } else {
        for (const Range& range : *only) {
          const size_t from = std::max(range.first, done), to = std::min(range.second, done + n);
          if (from < to) combine_range(done, from, to - from);
        }
      }
    });
    done += n;
  }
}

void ShmReduce::all_reduce_mapped(const std::vector<unsigned char*>& copies, size_t count,
                                  ShmType type, ShmOp op, std::chrono::milliseconds timeout) {
  if (copies.size() != static_cast<size_t>(world_))
    fail(Errc::internal, "shared-memory all-reduce: one copy per rank expected");
  const size_t elem = type_size(type);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const size_t first = part_start(count, rank_, world_, elem);
  const size_t last = part_start(count, rank_ + 1, world_, elem);
  // The result goes through a chunk that stays in cache on its way to every copy: combining into
  // this rank's own copy would overwrite an input a later pass of a 3+ rank sum still reads.
  constexpr size_t kChunkBytes = 64 << 10;
  thread_local std::vector<unsigned char> chunk(kChunkBytes);
  std::vector<unsigned char*> at(world_);
  exchange_round(nullptr, 0, deadline, timeout, "all-reduce", [&] {
    for (size_t from = first; from < last;) {
      const size_t n = std::min(kChunkBytes / elem, last - from);
      for (int r = 0; r < world_; ++r) at[r] = copies[r] + from * elem;
      combine_typed(chunk.data(), at.data(), world_, n, type, op);
      for (int r = 0; r < world_; ++r) std::memcpy(at[r], chunk.data(), n * elem);
      from += n;
    }
  });
  // Every rank's part must be in this rank's copy before it is used, and no rank may still read
  // it when this rank writes it again.
  wait_all(false, round_, deadline, timeout, "all-reduce");
}

void ShmReduce::all_gather(const void* mine, const std::vector<size_t>& bytes_of, void* out,
                           std::chrono::milliseconds timeout) {
  if (bytes_of.size() != static_cast<size_t>(world_))
    fail(Errc::internal, "shared-memory all-gather: one size per rank expected");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<size_t> start(world_, 0);
  size_t largest = 0;
  for (int r = 1; r < world_; ++r) start[r] = start[r - 1] + bytes_of[r - 1];
  for (size_t b : bytes_of) largest = std::max(largest, b);
  const auto* from = static_cast<const unsigned char*>(mine);
  auto* to = static_cast<unsigned char*>(out);
  // Each round every rank puts the next slot's worth of its bytes in its slot (fewer, or none,
  // once its bytes are out) and copies every rank's piece of that round to its place.
  for (size_t done = 0; done < largest; done += slot_bytes_) {
    const size_t n = bytes_of[rank_] > done ? std::min(slot_bytes_, bytes_of[rank_] - done) : 0;
    exchange_round(from + done, n, deadline, timeout, "all-gather", [&] {
      for (int r = 0; r < world_; ++r) {
        const size_t piece = bytes_of[r] > done ? std::min(slot_bytes_, bytes_of[r] - done) : 0;
        if (piece > 0) std::memcpy(to + start[r] + done, slot(r), piece);
      }
    });
  }
}

}  // namespace accel::runtime
