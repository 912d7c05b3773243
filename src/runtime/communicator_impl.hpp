// What the communicator's two files share: its process groups and transports (Impl), and how a
// failure from LibTorch or Gloo is told apart. Private to src/runtime.
#pragma once

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "compat/dist_errors.hpp"
#include "compat/process_group.hpp"
#include "compat/tcp_store.hpp"
#include "net/ring.hpp"
#include "net/sequencer.hpp"
#include "runtime/communicator.hpp"
#include "runtime/shared_buffer.hpp"
#include "runtime/shm_reduce.hpp"
#include "store/endpoint.hpp"
#include "store/server.hpp"

namespace accel::runtime {

namespace detail {

inline bool contains(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}

// A timeout is told by the text in both lines (2.x's socket timeout is a DistNetworkError like a
// broken connection). Otherwise 2.x's type says that the network failed; gloo's own exceptions
// and 1.13's plain c10::Error leave only the text.
inline Errc classify(const std::exception& e, const std::string& message) {
  if (contains(message, "Timed out") || contains(message, "timed out") ||
      contains(message, "Timeout") || contains(message, "timeout"))
    return Errc::timeout;
  if (compat::dist_failure_of(e) == compat::DistFailure::kNetwork) return Errc::peer_failed;
  if (contains(message, "closed by peer") || contains(message, "reset by peer") ||
      contains(message, "Broken pipe") || contains(message, "Connection refused") ||
      contains(message, "pair closure") || contains(message, "Connection closed"))
    return Errc::peer_failed;
  return Errc::torch;
}

// "0.5", never "0,5": an ostream would use the host program's global C++ locale.
std::string seconds_text(std::chrono::milliseconds ms);
// The local address of a route to addr:port (a UDP "connect" sends nothing).
std::string local_address_towards(const std::string& addr, int port);
// The first IPv4 address of a network interface (else its first IPv6 one); Errc::rendezvous when
// it has none.
std::string interface_address(const std::string& name);
// The state letter and start time of a process from /proc/<pid>/stat; false when it is gone.
bool process_status(long long pid, char* state, uint64_t* start_time);

inline std::string what_of(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

}  // namespace detail

// Who a rank is, exchanged once at start-up so that a failed collective can name the peer that
// died or stalled, and its host.
struct PeerInfo {
  std::string host;     // gethostname()
  std::string boot_id;  // same boot id: same kernel, so the pid can be checked from here
  std::string address;  // the address this rank reaches the store from
  long long pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
};

struct Communicator::Impl {
  std::unique_ptr<store::StoreServer> server;  // rank 0's; outlives every client of it here
  store::StoreEndpoint store_at;
  std::string token_source;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Store> job_store;
  c10::intrusive_ptr<compat::Group> group;  // Gloo, when collective_transport is gloo
  // libaccel's TCP ring (otherwise), and the thread that runs its collectives in order. The
  // sequencer goes first: its running collective uses the ring.
  std::unique_ptr<net::Ring> ring;
  std::unique_ptr<net::Sequencer> sequencer;
  c10::intrusive_ptr<compat::Group> device_group;  // NCCL, after attach_device
  int device_index = -1;

  // Gloo for CPU tensors (when it is the transport), NCCL for this rank's device.
  compat::Group& group_for(const at::Tensor& t) {
    if (!t.is_cuda()) return *group;
    if (!device_group || t.get_device() != device_index)
      fail(Errc::invalid_argument,
           "a collective got a tensor on " + t.device().str() +
               " but this rank's process groups carry CPU tensors" +
               (device_group ? " and cuda:" + std::to_string(device_index) : ""));
    return *device_group;
  }
  std::unique_ptr<ShmReduce> shm;
  std::string shm_name;      // the segment's (removed) name: the stem of the shared buffers'
  uint64_t shared_made = 0;  // shared_zeros calls so far: the next buffers' number
  // Every rank's copy of a shared_zeros buffer, by rank, kept alive by the tensor's storage.
  struct MappedCopies {
    std::vector<SharedBuffer> copies;
  };
  // By the address of this rank's copy; an entry whose tensor is gone has expired.
  std::map<const void*, std::weak_ptr<MappedCopies>> mapped;
  std::vector<PeerInfo> peers;  // by rank; empty until exchanged
};

}  // namespace accel::runtime
