// The process group of a job: rendezvous through libaccel's token-guarded store (or torchrun's), a
// census of the ranks, and collectives with timeouts and failure classification: over shared
// memory between ranks on one machine, libaccel's authenticated TCP ring (src/net) otherwise, NCCL
// on a GPU. Callers see accel::Error only.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "logging/logger.hpp"
#include "runtime/process_place.hpp"

namespace accel::runtime {

enum class ReduceOp { kSum, kMax, kMin };

struct CommOptions {
  std::chrono::milliseconds rendezvous{120000};
  std::chrono::milliseconds collective{300000};
  // When every rank is on this machine, all-reduces of fp32/fp64/int32/int64 CPU tensors go
  // through a shared-memory segment instead of Gloo's TCP loopback (see shm_reduce.hpp).
  bool shared_memory = true;
  // CPU collectives over LibTorch's Gloo instead of libaccel's own TCP transport, whose every
  // connection proves the job token (Gloo's listener accepts anyone: for comparison only).
  bool gloo = false;
  // Where the rendezvous store's and this communicator's notes go (null: the process's logger).
  logging::Logger* logger = nullptr;
};

// An all-reduce in flight (see Communicator::all_reduce_start).
struct PendingReduce;
// An all-gather in flight (see Communicator::all_gather_bytes_start).
struct PendingGather;

class Communicator {
 public:
  // Meets the other ranks: opens (or hosts) the store, runs the census, connects the ranks
  // for collectives (every connection authenticated, see net/mesh.hpp).
  // Throws accel::Error(rendezvous) naming the missing ranks or the unreachable store.
  Communicator(const ProcessPlace& place, const CommOptions& comm_options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Which ranks share this machine: the engine's word when it gave one, else found from the host
  // identities the ranks exchanged.
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  // How all-reduces travel: "shared memory", "tcp" or "gloo", with the reason when shared memory
  // was wanted but could not be set up.
  const std::string& all_reduce_transport() const { return transport_; }

  // Forms the NCCL process group for CUDA device `index` (libaccel's CUDA part): from then on
  // tensors on that device travel over NCCL, on the device, and CPU tensors over Gloo (or shared
  // memory). Every rank calls it, with its own device. Throws accel::Error(rendezvous).
  void attach_device(int index);
  // The device a collective carries `t` on: its own when NCCL serves it, else the CPU.
  c10::Device wire_device(const at::Tensor& t) const;
  // The GPU attach_device() bound this rank to; the CPU before that.
  c10::Device attached_device() const;

  // Every rank's tensor, in rank order. Tensors must be contiguous, on their wire_device(), of the
  // same shape and dtype on every rank (the ops layer checks that first).
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor);
  // Every rank's bytes in rank order into `out` (uint8, contiguous, sum of `bytes_of`): rank r
  // gives bytes_of[r] bytes from `mine` (uint8, contiguous), the same `bytes_of` on every rank.
  // Shared memory reads each byte once; Gloo and NCCL all-gather parts padded to the largest.
  void all_gather_bytes(const at::Tensor& mine, const std::vector<int64_t>& bytes_of,
                        at::Tensor& out);
  // all_gather_bytes, started: over shared memory it completes here (memory-bound work on this
  // rank's own core, which a thread would take from compute); over Gloo and NCCL it proceeds while
  // this rank computes, until all_gather_bytes_finish. `mine` and `out` stay untouched until
  // then. A part only one rank gives travels as a broadcast from it (no padding to gather).
  // Every rank starts the same collectives in the same order.
  std::shared_ptr<PendingGather> all_gather_bytes_start(const at::Tensor& mine,
                                                        const std::vector<int64_t>& bytes_of,
                                                        at::Tensor& out);
  void all_gather_bytes_finish(const std::shared_ptr<PendingGather>& pending);
  // Whether a started collective proceeds while this rank computes (Gloo, NCCL) rather than
  // completing as it is started (shared memory): what makes prefetching worth its memory.
  bool overlaps_compute() const;
  // In place, on a contiguous tensor on its wire_device().
  void all_reduce(at::Tensor& tensor, ReduceOp op);
  // In place, on a contiguous tensor on its wire_device(), of the same shape on every rank.
  void broadcast(at::Tensor& tensor, int root);
  void barrier();
  // Starts an in-place sum all-reduce and returns at once; finish() waits for it. Every rank must
  // start the same all-reduces in the same order. `average` (floating types): the sum divided by
  // size(), in the reduction's own pass where the transport can.
  std::shared_ptr<PendingReduce> all_reduce_start(at::Tensor& tensor, bool average = false);
  void all_reduce_finish(const std::shared_ptr<PendingReduce>& pending);
  // A zero-filled CPU tensor of `numel` elements that every rank on this machine maps, when
  // all-reduces travel through shared memory: an all-reduce of the whole of it (all_reduce,
  // all_reduce_start) reads and writes the other ranks' copies in place rather than copying
  // through the segment. Every rank calls it with the same numel and dtype, in the same order.
  // Otherwise (Gloo, a device, a /dev/shm too small: every rank agrees) an ordinary tensor.
  at::Tensor shared_zeros(int64_t numel, const at::TensorOptions& options);
  // Where the rendezvous store listens (rank 0) or is reached, and whose job token guards it,
  // for the debug line.
  std::string store_summary() const;
  // Whether an all-reduce of `tensor` works on the ranks' mapped copies (see shared_zeros).
  bool maps_peers(const at::Tensor& tensor) const;
  // A sum (or average) of which this rank needs only the elements in `mine` ([first, second),
  // sorted, disjoint): shared memory combines just those here (the rest of `tensor` keeps this
  // rank's input), other transports reduce it whole. Every rank takes part with its own ranges.
  void reduce_for(at::Tensor& tensor, bool average,
                  const std::vector<std::pair<int64_t, int64_t>>& mine);
  // A sum (or average) of a contiguous CPU tensor of which this rank keeps the elements
  // net::Ring::segment(numel, size(), rank()): over the TCP ring a reduce-scatter (each rank sends
  // and receives (N-1)/N of the tensor once, half an all-reduce); over shared memory or Gloo an
  // all-reduce. The rest of the tensor is undefined afterwards.
  void reduce_scatter(at::Tensor& tensor, bool average);

 private:
  struct Impl;
  void census(const ProcessPlace& place, const CommOptions& options,
              std::chrono::steady_clock::time_point deadline, bool host_store,
              const std::string& endpoint);
  void join_launcher_store(const ProcessPlace& place, const CommOptions& options,
                           std::chrono::steady_clock::time_point deadline,
                           const std::string& endpoint, const std::string& who_hosts);
  void open_token_store(const ProcessPlace& place, const CommOptions& options,
                        std::chrono::steady_clock::time_point deadline, bool host_store,
                        const std::string& endpoint);
  void setup_shared_memory();
  void form_gloo_group(const ProcessPlace& place, const CommOptions& options);
  void form_tcp_ring(const ProcessPlace& place, const CommOptions& options,
                     std::chrono::steady_clock::time_point deadline);
  std::string collective_address(const ProcessPlace& place) const;
  void exchange_identities(const ProcessPlace& place);
  void find_local_ranks(const ProcessPlace& place);
  std::string diagnose_peers(const std::string& message, bool peer_failed) const;
  std::string diagnose_peers_once(const std::string& message) const;
  std::string host_name() const;
  bool reduce_in_shared_memory(at::Tensor& tensor, ReduceOp op, bool average = false,
                               const std::vector<std::pair<size_t, size_t>>* only = nullptr);
  // Every rank's copies of `tensor`'s buffer, by rank, when it is a whole shared_zeros buffer.
  std::vector<unsigned char*> peer_copies(const at::Tensor& tensor) const;
  // Whether every rank's `ok` is true (over shared memory).
  bool all_agree(bool ok);
  template <class F>
  void guarded(const char* what, F&& body);
  bool on_ring(const at::Tensor& t) const;

  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;
  std::chrono::milliseconds collective_timeout_;
  std::string transport_ = "tcp";
  std::string broken_;  // set once a collective failed: the group is unusable after that
};

}  // namespace accel::runtime
