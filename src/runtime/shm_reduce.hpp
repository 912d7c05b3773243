// All-reduce through a shared-memory segment, for ranks that share one machine. Gloo's only
// transport here is TCP: over loopback a 1 MB all-reduce costs ~1.5-3 ms of socket round trips and
// thread hand-offs, more than the whole step of a small model. Through shared memory each rank
// copies its chunk into its slot, waits for the others (futexes on the segment), and sums all slots
// in rank order, so every rank gets bitwise the same result. A peer that dies is seen through its
// pidfd within milliseconds; one that never arrives fails after the collective timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/shared_buffer.hpp"

namespace accel::runtime {

enum class ShmType { kF32, kF64, kI32, kI64 };
// kAvg: the sum divided by the number of ranks in the same pass (floating types only).
enum class ShmOp { kSum, kMax, kMin, kAvg };

class ShmReduce {
 public:
  // Slot size per rank: large enough that a bucket needs few rounds, small enough that the segment
  // fits a container's default 64 MB /dev/shm.
  static size_t default_slot_bytes(int world);

  // Rank 0 creates the segment (an unused name under /dev/shm, sized with posix_fallocate so a
  // full /dev/shm is an error here rather than a SIGBUS later); the other ranks attach to it by
  // name and check its token. Throws accel::Error(io) when that fails.
  static ShmReduce create(const std::string& name, int world, size_t slot_bytes, uint64_t token);
  static ShmReduce attach(const std::string& name, int rank, int world, size_t slot_bytes,
                          uint64_t token);
  // Once every rank has attached: records this rank's pid for the others, and removes the name
  // (the mapping stays), so no segment outlives the job however it ends.
  void publish_pid();
  static void unlink(const std::string& name);
  // After every rank published its pid: opens a pidfd on each peer.
  void watch_peers();

  ShmReduce(ShmReduce&& other) noexcept;
  ShmReduce& operator=(ShmReduce&& other) noexcept;
  ShmReduce(const ShmReduce&) = delete;
  ShmReduce& operator=(const ShmReduce&) = delete;
  ~ShmReduce();

  // In place on `count` elements at `data`. Every rank must call it with the same type, op and
  // count, in the same order. Throws accel::Error(peer_failed) naming a rank that died,
  // accel::Error(timeout) naming the ranks that did not arrive within `timeout`.
  // Elements [first, second) of a tensor.
  using Range = std::pair<size_t, size_t>;
  // With `only` (sorted, disjoint ranges), this rank combines just those elements and leaves the
  // rest of `data` as it gave it: a reduce-scatter to whoever keeps each range (every rank still
  // contributes all of `data`), each reading 1/N of what a full all-reduce reads.
  void all_reduce(void* data, size_t count, ShmType type, ShmOp op,
                  std::chrono::milliseconds timeout, const std::vector<Range>* only = nullptr);
  // In place on `count` elements of which every rank holds a copy that this rank maps: copies[r]
  // is rank r's (copies[rank] this rank's own, see SharedBuffer). Each rank combines about 1/N
  // of the elements from every copy, in rank order, and writes the result into every copy: no
  // data passes through the slots, and each rank reads and writes each element once where
  // all_reduce copies it in, reads it N times and writes it twice. Returns once every rank has
  // written its part. Calling rules and errors as all_reduce (it is one of the same sequence).
  void all_reduce_mapped(const std::vector<unsigned char*>& copies, size_t count, ShmType type,
                         ShmOp op, std::chrono::milliseconds timeout);
  // Every rank's bytes, concatenated in rank order into `out` (sum of `bytes_of` bytes; rank r
  // gives bytes_of[r], which may differ between ranks, from `mine`). Every rank passes the same
  // `bytes_of`. Each rank reads each byte once: an all-gather, not a sum of zero-padded buffers.
  // Errors as all_reduce.
  void all_gather(const void* mine, const std::vector<size_t>& bytes_of, void* out,
                  std::chrono::milliseconds timeout);

 private:
  ShmReduce() = default;
  void map(SharedBuffer segment, int rank, int world, size_t slot_bytes);
  uint32_t* arrive_word(int r) const;
  uint32_t* done_word(int r) const;
  unsigned char* slot(int r) const;
  void publish(uint32_t* word, uint32_t value);
  void wait_all(bool arrivals, uint32_t target, std::chrono::steady_clock::time_point deadline,
                std::chrono::milliseconds timeout, const char* what);
  template <class Use>
  void exchange_round(const void* mine, size_t bytes,
                      std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout, const char* what, Use&& use);

  SharedBuffer segment_;
  unsigned char* base_ = nullptr;  // segment_.data()
  size_t slot_bytes_ = 0;
  int rank_ = 0;
  int world_ = 0;
  uint32_t round_ = 0;
  std::vector<int> pidfds_;
};

}  // namespace accel::runtime
