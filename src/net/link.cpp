#include "net/link.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <cerrno>

#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "common/parse.hpp"

namespace accel::net {

Link::Link(int fd, int peer, std::string address)
    : fd_(fd), peer_(peer), address_(std::move(address)) {
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

Link::Link(Link&& other) noexcept
    : fd_(other.fd_), peer_(other.peer_), address_(std::move(other.address_)) {
  other.fd_ = -1;
}

Link& Link::operator=(Link&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    peer_ = other.peer_;
    address_ = std::move(other.address_);
    other.fd_ = -1;
  }
  return *this;
}

Link::~Link() {
  if (fd_ >= 0) close(fd_);
}

std::string Link::who() const {
  return "rank " + std::to_string(peer_) + " [" + address_ + "]";
}

void encode(const Header& h, unsigned char* out) {
  const uint64_t words[2] = {
      static_cast<uint64_t>(h.sequence) | static_cast<uint64_t>(h.kind) << 32 |
          static_cast<uint64_t>(h.detail) << 40 | static_cast<uint64_t>(h.step) << 48,
      h.length};
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 8; ++i) out[8 * w + i] = static_cast<unsigned char>(words[w] >> (8 * i));
}

Header decode(const unsigned char* in) {
  uint64_t words[2] = {0, 0};
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 8; ++i) words[w] |= static_cast<uint64_t>(in[8 * w + i]) << (8 * i);
  Header h;
  h.sequence = static_cast<uint32_t>(words[0]);
  h.kind = static_cast<uint8_t>(words[0] >> 32);
  h.detail = static_cast<uint8_t>(words[0] >> 40);
  h.step = static_cast<uint16_t>(words[0] >> 48);
  h.length = words[1];
  return h;
}

namespace {

size_t total(const Flow& f) {
  return kHeaderBytes + f.header.length;
}

[[noreturn]] void connection_failed(const Flow& f, int err) {
  const std::string how = err == 0 ? "was closed by peer" : sys_error("failed", err);
  fail(Errc::peer_failed, "the connection to " + f.link->who() + " " + how);
}

std::string describe(const Header& h) {
  return "collective #" + std::to_string(h.sequence) + " (kind " + std::to_string(h.kind) +
         ", step " + std::to_string(h.step) + ", " + std::to_string(h.length) + " bytes)";
}

void check_header(const Flow& f) {
  const Header got = decode(f.header_bytes);
  const Header& want = f.header;
  if (got.sequence == want.sequence && got.kind == want.kind && got.detail == want.detail &&
      got.step == want.step && got.length == want.length)
    return;
  fail(Errc::state, f.link->who() + " sent " + describe(got) + " where this rank expected " +
                        describe(want) +
                        ": the ranks called collectives in a different order, or with different "
                        "sizes or dtypes");
}

// Passes the newly arrived whole units (all of them at the end) to the flow's callback.
void report(Flow& f, bool force) {
  if (!f.arrived || f.moved <= kHeaderBytes) return;
  const size_t body = f.moved - kHeaderBytes;
  if (!force && body - f.reported < f.grain && body != f.header.length) return;
  const size_t upto = body == f.header.length ? body : body - body % f.unit;
  if (upto <= f.reported) return;
  f.arrived(f.reported, upto);
  f.reported = upto;
}

// Moves what the socket takes or gives now; false when it would block.
bool step_send(Flow& f) {
  iovec iov[2];
  int n = 0;
  if (f.moved < kHeaderBytes) {
    iov[n++] = {f.header_bytes + f.moved, kHeaderBytes - f.moved};
    if (f.header.length) iov[n++] = {f.body, f.header.length};
  } else {
    iov[n++] = {f.body + (f.moved - kHeaderBytes), total(f) - f.moved};
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n);
  const ssize_t sent = sendmsg(f.link->fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    connection_failed(f, errno);
  }
  f.moved += static_cast<size_t>(sent);
  return true;
}

bool step_recv(Flow& f) {
  unsigned char* to;
  size_t want;
  if (f.moved < kHeaderBytes) {
    to = f.header_bytes + f.moved;
    want = kHeaderBytes - f.moved;
  } else if (f.ring) {
    const size_t at = (f.moved - kHeaderBytes) % f.ring;
    to = f.body + at;
    want = std::min(total(f) - f.moved, f.ring - at);
  } else {
    to = f.body + (f.moved - kHeaderBytes);
    want = total(f) - f.moved;
  }
  const ssize_t got = recv(f.link->fd(), to, want, MSG_DONTWAIT);
  if (got == 0) connection_failed(f, 0);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    connection_failed(f, errno);
  }
  const bool had_header = f.moved >= kHeaderBytes;
  f.moved += static_cast<size_t>(got);
  if (!had_header && f.moved >= kHeaderBytes) check_header(f);
  report(f, f.ring != 0);
  return true;
}

[[noreturn]] void timed_out(const std::vector<Flow>& flows, const Watch& watch) {
  std::string owing, owed;
  for (const Flow& f : flows) {
    if (f.moved == total(f)) continue;
    std::string& list = f.sending ? owed : owing;
    const std::string who = f.link->who();
    if (list.find(who) == std::string::npos) list += (list.empty() ? "" : ", ") + who;
  }
  std::string detail;
  if (!owing.empty()) detail = "waited for " + owing;
  if (!owed.empty()) detail += (detail.empty() ? "" : "; ") + owed + " took no more of its part";
  fail(Errc::timeout, std::string(watch.what) + " timed out after " +
                          format_real(static_cast<double>(watch.timeout.count()) / 1000.0) +
                          " s: " + detail);
}

}  // namespace

void move_all(std::vector<Flow>& flows, const Watch& watch) {
  for (Flow& f : flows)
    if (f.sending) encode(f.header, f.header_bytes);
  std::vector<pollfd> fds;
  for (;;) {
    // Move what moves without waiting, one call per flow in turn (both directions of a socket
    // stay busy), then poll for the rest.
    bool progress = true;
    while (progress) {
      progress = false;
      for (Flow& f : flows)
        if (f.moved < total(f) && (f.sending ? step_send(f) : step_recv(f))) progress = true;
    }
    fds.clear();
    for (Flow& f : flows)
      if (f.moved < total(f))
        fds.push_back({f.link->fd(), static_cast<short>(f.sending ? POLLOUT : POLLIN), 0});
    if (fds.empty()) break;
    if (watch.closing && watch.closing->load(std::memory_order_acquire))
      fail(Errc::state, std::string(watch.what) + ": the communicator was closed");
    interrupt::check(watch.what);
    const auto now = std::chrono::steady_clock::now();
    if (now >= watch.deadline) timed_out(flows, watch);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(watch.deadline - now).count() + 1;
    const int wait = static_cast<int>(std::min<long long>(left, interrupt::kPollSlice.count()));
    if (poll(fds.data(), fds.size(), wait) < 0 && errno != EINTR)
      fail(Errc::internal, sys_error("poll", errno));
  }
  for (Flow& f : flows)
    if (!f.sending) report(f, true);
}

}  // namespace accel::net
