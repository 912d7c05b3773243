// libaccel's collectives over TCP: a ring over the job's authenticated connections (mesh.hpp).
// All-reduce is a reduce-scatter then an all-gather around the ring (each rank sends and receives
// 2(N-1)/N of the data, the least any algorithm can); a broadcast is a pipelined chain from the
// root. A reduction overlaps the transfer: each received piece is combined as it arrives.
// Every rank gets bitwise the same result: each segment is summed by one rank and then copied.
// Pure logic: raw memory, element types from reduce.hpp.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "net/link.hpp"
#include "net/reduce.hpp"

namespace accel::net {

class Ring {
 public:
  // `links` by rank (this rank's own entry unconnected), each authenticated.
  Ring(int rank, int size, std::vector<Link> links, std::chrono::milliseconds timeout);
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Every collective: every rank calls it with the same arguments (but its own data), in the
  // same order. Errors: those of move_all (link.hpp); after one, every later call fails with
  // Errc::state naming the first failure (the ranks no longer agree where they are).

  // In place; `average` (floating types): the sum divided by size().
  void all_reduce(void* data, size_t count, DType type, Op op, bool average);
  // Leaves the reduced segment(count, size(), rank()) of `data` in place; the rest of `data` is
  // scratch afterwards.
  void reduce_scatter(void* data, size_t count, DType type, Op op, bool average);
  // Elements [first, second) that rank `index` keeps in a reduce-scatter of `count` elements.
  static std::pair<size_t, size_t> segment(size_t count, int size, int index);
  // In place in `out`: rank r's part is bytes_of[r] bytes at the sum of the parts before it; this
  // rank's own part must be there already.
  void all_gather(void* out, const std::vector<size_t>& bytes_of);
  void broadcast(void* data, size_t bytes, int root);
  void barrier();

  // Makes a collective that is running (on another thread) or later fail at once.
  void close() { closing_.store(true, std::memory_order_release); }

 private:
  enum Kind : uint8_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier };
  template <class Body>
  void collective(const char* what, Body&& body);
  // `average`: the last step divides what it sums by size() in the same pass.
  void scatter_reduce(unsigned char* data, size_t count, DType type, Op op, bool average, Kind kind,
                      const Watch& watch);
  void gather_segments(unsigned char* data, size_t count, DType type, Kind kind,
                       const Watch& watch);
  Flow send_to(int peer, Kind kind, uint8_t detail, const void* body, size_t bytes);
  Flow recv_from(int peer, Kind kind, uint8_t detail, void* body, size_t bytes);
  int right() const { return (rank_ + 1) % size_; }
  int left() const { return (rank_ + size_ - 1) % size_; }

  int rank_;
  int size_;
  std::vector<Link> links_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> closing_{false};
  std::string broken_;
  uint32_t sequence_ = 0;
  uint16_t step_ = 0;  // the next message's step within the running collective
  std::vector<unsigned char> scratch_;
};

}  // namespace accel::net
