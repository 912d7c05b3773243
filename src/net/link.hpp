// An authenticated connection to one peer rank, and the engine that moves a collective step's
// messages over several of them at once: non-blocking sockets under poll(), so that a rank sends to
// one neighbour while it receives from another (or both ways on one socket) without either side's
// socket buffer filling into a deadlock. Pure logic.
//
// Every message is a 16-byte header and a body. Both sides know what the next message must be
// (collectives run in the same order with the same sizes on every rank); the header says which
// collective, step and length it is, so that ranks that disagree fail with a message saying so
// instead of reading one collective's bytes as another's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accel::net {

class Link {
 public:
  Link() = default;
  // Takes `fd` (connected, authenticated), made non-blocking with TCP_NODELAY here.
  Link(int fd, int peer, std::string address);
  Link(Link&& other) noexcept;
  Link& operator=(Link&& other) noexcept;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link();

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int peer() const { return peer_; }
  // "rank 1 [10.0.0.2]": the address in brackets, as Communicator::diagnose_peers looks for it.
  std::string who() const;

 private:
  int fd_ = -1;
  int peer_ = -1;
  std::string address_;
};

// What a message is: both sides compute the same header for the same message.
struct Header {
  uint32_t sequence = 0;  // the collective's number on this ring
  uint8_t kind = 0;       // which collective (Ring's Kind)
  uint8_t detail = 0;     // its dtype, or 0
  uint16_t step = 0;      // the step within the collective
  uint64_t length = 0;    // the body's bytes
};
constexpr size_t kHeaderBytes = 16;

// One message over one link, sent or received.
struct Flow {
  Link* link = nullptr;
  bool sending = false;
  Header header;  // sent as is, or what the received one must be
  unsigned char* body = nullptr;
  // Receiving: called with each newly arrived byte range [from, to) of the body, in multiples of
  // `unit` bytes (the last one whatever remains), at least every `grain` bytes, so that a
  // reduction overlaps the rest of the transfer. May be empty.
  std::function<void(size_t from, size_t to)> arrived;
  size_t unit = 1;
  size_t grain = 256 << 10;
  // Receiving with `arrived`: when nonzero, `body` is a circular buffer of this many bytes (a
  // multiple of `unit`): body byte o lands at body + o % ring and is passed to `arrived` as soon
  // as it is whole, before the buffer comes round to it again.
  size_t ring = 0;
  // Progress, kept by move_all.
  size_t moved = 0;     // bytes of header and body
  size_t reported = 0;  // body bytes passed to `arrived`
  unsigned char header_bytes[kHeaderBytes] = {};
};

// When waiting ends: the collective's deadline, its name for messages, and the flag that closing
// the ring sets.
struct Watch {
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout;
  const char* what = "";
  const std::atomic<bool>* closing = nullptr;
};

// Moves every flow to its end. Throws accel::Error: peer_failed when a connection closes or
// breaks (naming the peer), timeout when the deadline passes first (naming the peers still owed
// or owing bytes), state when a received header is not the expected one or the ring is closed,
// cancelled when the program interrupted waiting calls.
void move_all(std::vector<Flow>& flows, const Watch& watch);

// The header's 16 bytes, little-endian.
void encode(const Header& h, unsigned char* out);
Header decode(const unsigned char* in);

}  // namespace accel::net
