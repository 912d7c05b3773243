// The connections of a job's collectives: each rank and its two neighbours in the ring (rank r and
// r+1, the last and rank 0), each connection authenticated both ways before any collective byte
// crosses it: two connections per rank whatever the job's size. Of each pair the higher rank
// connects and the lower one listens (on the address given: loopback for a one-machine job). The
// listener lives only until its neighbours have connected: afterwards the job listens nowhere
// but its rendezvous store.
//
// The handshake proves the job's collective key (derived from the job token, see mesh_key) without
// sending it, over fresh nonces and both ranks' numbers:
//   acceptor -> connector  "ACCELNS1" + u32 acceptor's rank + nonce (16)
//   connector -> acceptor  "ACCELNC1" + u32 connector's rank + nonce (16) + proof (32)
//   acceptor -> connector  proof (32), or the connection closes: refused
// A connection that does not complete it within the handshake timeout (0.8 s) is closed, and named
// in the log with what it did wrong. Pure logic.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "net/link.hpp"

namespace accel::net {

struct MeshSetup {
  int rank = 0;
  int size = 1;
  std::string listen_address;  // numeric, IPv4 or IPv6
  std::string key;             // the job's collective key
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds handshake_timeout{800};  // as the store's: a stranger is out within 1 s
  // Publishes this rank's "address port" for the neighbours that connect to it.
  std::function<void(const std::string&)> publish;
  // Rank r's published "address port", waiting for it until the deadline.
  std::function<std::string(int)> lookup;
  // A refused connection, for the log (from the listener's thread).
  std::function<void(const std::string&)> refused;
  std::string name;  // "rank 0's collectives listener", for those lines
};

// The authenticated connections to this rank's ring neighbours, by rank (the other entries
// unconnected). Throws accel::Error(rendezvous) naming the rank that could not be reached, did not
// connect in time, or failed the handshake.
std::vector<Link> form_mesh(const MeshSetup& setup);

// This rank's ring neighbours below it, which it connects to (`connecting`), or above it, whose
// connections it accepts.
std::vector<int> ring_peers(int rank, int size, bool connecting);

// The key the handshake proves: from the job token and a random session value rank 0 draws and
// shares through the (token-guarded) store, so that no two jobs share one even without a token.
std::string mesh_key(const std::string& job_token, const std::string& session);

}  // namespace accel::net
