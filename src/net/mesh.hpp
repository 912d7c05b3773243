// The connections of a job's collectives: every pair of ranks, each connection authenticated both
// ways before any collective byte crosses it. Rank i listens (on the address given: loopback for
// a one-machine job) and accepts the ranks above it; it connects to the ranks below it. The
// listener lives only until the ranks above have connected: afterwards the job listens nowhere
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
  // Publishes this rank's "address port" for the ranks above it.
  std::function<void(const std::string&)> publish;
  // Rank r's published "address port", waiting for it until the deadline.
  std::function<std::string(int)> lookup;
  // A refused connection, for the log (from the listener's thread).
  std::function<void(const std::string&)> refused;
  std::string name;  // "rank 0's collectives listener", for those lines
};

// Every other rank's authenticated connection, by rank. Throws accel::Error(rendezvous) naming the
// rank that could not be reached, did not connect in time, or failed the handshake.
std::vector<Link> form_mesh(const MeshSetup& setup);

// The key the handshake proves: from the job token and a random session value rank 0 draws and
// shares through the (token-guarded) store, so that no two jobs share one even without a token.
std::string mesh_key(const std::string& job_token, const std::string& session);

}  // namespace accel::net
