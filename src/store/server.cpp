#include "store/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "logging/logger.hpp"
#include "security/random.hpp"
#include "store/wire.hpp"

namespace accel::store {

namespace {

using Clock = std::chrono::steady_clock;

// Connections at once: the job's ranks (and their clones) and some strangers; more are refused.
constexpr size_t kMaxConnections = 4096;
// Refusals logged one by one; after that every 100th, so a scan cannot flood the log.
constexpr uint64_t kLoggedRefusals = 20;

std::string peer_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  port = ntohs(v6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

// What a stranger sent, for the log: its printable start, or its first bytes in hex.
std::string describe_bytes(const std::string& in) {
  const size_t n = std::min<size_t>(in.size(), 16);
  bool printable = true;
  for (size_t i = 0; i < n; ++i)
    if (in[i] < 32 || in[i] > 126) printable = false;
  std::string shown;
  if (printable) {
    shown = "\"" + in.substr(0, n) + "\"";
  } else {
    static const char* hex = "0123456789abcdef";
    for (size_t i = 0; i < n; ++i) {
      const auto b = static_cast<uint8_t>(in[i]);
      shown += std::string(i ? " " : "") + hex[b >> 4] + hex[b & 15];
    }
  }
  return shown + (in.size() > n ? " ..." : "");
}

struct Conn {
  int fd = -1;
  std::string peer;
  bool ready = false;  // the handshake is done
  Clock::time_point handshake_deadline;
  uint8_t nonce[kNonceBytes];
  std::string in, out;
  bool closing = false;
  // A request that waits for keys (kGet, kWait).
  bool waiting = false;
  Op wait_op = Op::kWait;
  std::vector<std::string> wait_keys;
  bool wait_has_deadline = false;
  Clock::time_point wait_deadline;
  // Since when `in` has held the unfinished start of a request (not while waiting: a request
  // sent behind a waiting one is not stalled); unset while it holds none.
  bool partial = false;
  Clock::time_point partial_since;
};

// Whether `in` ends in a request cut short (whole requests before it aside).
bool holds_cut_request(const std::string& in) {
  size_t at = 0;
  while (in.size() - at >= 4) {
    const uint64_t len = read_u32(in.data() + at);
    if (in.size() - at - 4 < len) return true;
    at += 4 + static_cast<size_t>(len);
  }
  return at != in.size();
}

// "3 bytes of a request's length" or "10 of 25 bytes of a request": what an unfinished request
// in `in` amounts to.
std::string unfinished_request(const std::string& in) {
  if (in.size() < 4) return std::to_string(in.size()) + " bytes of a request's length";
  return std::to_string(in.size() - 4) + " of " + std::to_string(read_u32(in.data())) +
         " bytes of a request";
}

}  // namespace

struct StoreServer::Impl {
  ServerOptions options;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  int port = 0;
  std::string address;
  std::atomic<uint64_t> refused{0};
  std::thread thread;

  std::list<Conn> conns;
  std::unordered_map<std::string, std::vector<uint8_t>> kv;

  ~Impl() {
    if (thread.joinable()) {
      const char b = 1;
      (void)!write(wake[1], &b, 1);
      thread.join();
    }
    for (auto& c : conns) close(c.fd);
    for (int fd : {listen_fd, wake[0], wake[1]})
      if (fd >= 0) close(fd);
  }

  void log_refusal(const Conn& c, const std::string& reason) {
    const uint64_t n = ++refused;
    if (n > kLoggedRefusals && n % 100 != 0) return;
    std::string line = options.name + " refused a connection from " + c.peer + ": " + reason;
    if (n > kLoggedRefusals) line += " (" + std::to_string(n) + " refused so far; not all logged)";
    note(line);
  }

  // One line of the store's log: the owner's, or the process's logger.
  void note(const std::string& line) {
    if (options.log)
      options.log(line);
    else
      logging::process_logger().say(logging::kWarning, line);
  }

  void refuse(Conn& c, const std::string& reason) {
    log_refusal(c, reason);
    c.closing = true;
  }

  // A client that proved the token and left a request unfinished: named, never counted among the
  // refused strangers.
  void name_unfinished(const Conn& c, const std::string& what) {
    const std::string line = options.name + ": the connection from " + c.peer +
                             " (it proved the job token) " + what + " with " +
                             unfinished_request(c.in) + " unread";
    note(line);
  }

  void send(Conn& c, const std::string& bytes) {
    c.out += bytes;
    flush(c);
  }

  void flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.closing = true;  // the peer is gone
      c.out.clear();
      return;
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      const int fd =
          accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that went away before accept
      Conn c;
      c.fd = fd;
      c.peer = peer_text(a);
      if (conns.size() >= kMaxConnections) {
        log_refusal(c, "too many connections are open (" + std::to_string(kMaxConnections) + ")");
        close(fd);
        continue;
      }
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      security::random_bytes(c.nonce, kNonceBytes);
      c.handshake_deadline = Clock::now() + options.handshake_timeout;
      conns.push_back(std::move(c));
      Conn& added = conns.back();
      send(added, std::string(kServerHello, 8) +
                      std::string(reinterpret_cast<const char*>(added.nonce), kNonceBytes));
    }
  }

  void read_from(Conn& c) {
    char buf[65536];
    for (;;) {
      // Before the handshake, never more than the handshake: a stranger cannot make us hold more.
      const size_t want = c.ready ? sizeof buf : kClientHelloBytes - c.in.size();
      if (want == 0) return;
      const ssize_t n = recv(c.fd, buf, want, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (c.partial) c.partial_since = Clock::now();  // still arriving: not stalled
        if (!c.ready) {
          handshake(c);
          if (c.closing || !c.ready) return;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // Closed (or reset) by the peer.
      if (!c.ready)
        refuse(c, c.in.empty() ? "it closed without a word"
                               : "it sent " + std::to_string(c.in.size()) +
                                     " bytes of a handshake and closed");
      if (c.ready) {
        // Whole requests sent before the close are served (a set still takes effect); only a cut
        // one is named.
        serve_requests(c);
        if (!c.waiting && holds_cut_request(c.in))
          name_unfinished(c, "closed in the middle of a request");
      }
      c.closing = true;
      return;
    }
  }

  void handshake(Conn& c) {
    const size_t check = std::min<size_t>(c.in.size(), 8);
    if (std::memcmp(c.in.data(), kClientHello, check) != 0) {
      refuse(c, "it sent " + describe_bytes(c.in) +
                    ", not libaccel's handshake (a store client of another program, or not a "
                    "client at all)");
      return;
    }
    if (c.in.size() < kClientHelloBytes) return;
    const auto* client_nonce = reinterpret_cast<const uint8_t*>(c.in.data()) + 8;
    const auto expected = client_proof(options.token, c.nonce, client_nonce);
    if (!security::digests_equal(expected.data(),
                                 reinterpret_cast<const uint8_t*>(c.in.data()) + 8 + kNonceBytes,
                                 expected.size())) {
      refuse(c,
             "its proof of the job token is wrong (a process that is not a rank of this job, "
             "or a rank given another ACCEL_JOB_TOKEN)");
      return;
    }
    const auto proof = server_proof(options.token, c.nonce, client_nonce);
    c.in.clear();
    c.ready = true;
    send(c, std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
  }

  void serve_requests(Conn& c) {
    while (c.ready && !c.closing && !c.waiting && c.in.size() >= 4) {
      const uint32_t len = read_u32(c.in.data());
      if (len == 0 || len > kMaxMessage) {
        refuse(c, "a request of " + std::to_string(len) + " bytes (the limit is " +
                      std::to_string(kMaxMessage) + ")");
        return;
      }
      if (c.in.size() < 4 + static_cast<size_t>(len)) break;
      Reader r(c.in.data() + 4, len);
      handle(c, r);
      c.in.erase(0, 4 + static_cast<size_t>(len));
      c.partial = false;
    }
    if (c.in.empty() || c.waiting) {
      c.partial = false;
    } else if (!c.partial) {
      c.partial = true;
      c.partial_since = Clock::now();
    }
  }

  static Writer ok() { return Writer().u8(static_cast<uint8_t>(Status::kOk)); }

  // One request, answered; a malformed one is answered so.
  void handle(Conn& c, Reader& r) {
    const auto op = static_cast<Op>(r.u8());
    bool served = false;
    switch (op) {
      case Op::kSet:
        served = serve_set(c, r);
        break;
      case Op::kGet:
      case Op::kWait:
        served = serve_wait(c, r, op);
        break;
      case Op::kAdd:
        served = serve_add(c, r);
        break;
      case Op::kCheck:
        served = serve_check(c, r);
        break;
      case Op::kDelete:
        served = serve_delete(c, r);
        break;
      case Op::kNumKeys:
        served = r.done();
        if (served) send(c, ok().i64(static_cast<int64_t>(kv.size())).framed());
        break;
      case Op::kCompareSet:
        served = serve_compare_set(c, r);
        break;
    }
    if (!served)
      send(
          c,
          Writer().u8(static_cast<uint8_t>(Status::kBadRequest)).str("malformed request").framed());
  }

  // Each request kind: false when its body is malformed (nothing changed then).
  bool serve_set(Conn& c, Reader& r) {
    std::string key = r.str();
    auto value = r.vec();
    if (!r.done()) return false;
    kv[key] = std::move(value);
    send(c, ok().framed());
    wake_waiters();
    return true;
  }

  bool serve_wait(Conn& c, Reader& r, Op op) {
    std::vector<std::string> keys;
    if (op == Op::kGet) {
      keys.push_back(r.str());
    } else {
      const int64_t n = r.i64();
      if (n < 0 || n > 1 << 20) return false;
      for (int64_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.str());
    }
    const int64_t timeout_ms = r.i64();
    if (!r.done()) return false;
    c.waiting = true;
    c.wait_op = op;
    c.wait_keys = std::move(keys);
    c.wait_has_deadline = timeout_ms > 0;
    if (timeout_ms > 0) c.wait_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    try_complete(c);  // serve_requests goes on with the next request once this one is answered
    return true;
  }

  bool serve_add(Conn& c, Reader& r) {
    std::string key = r.str();
    const int64_t delta = r.i64();
    if (!r.done()) return false;
    long long value = 0;
    auto it = kv.find(key);
    if (it != kv.end() && !parse_int(std::string(it->second.begin(), it->second.end()), &value)) {
      send(c, Writer()
                  .u8(static_cast<uint8_t>(Status::kBadRequest))
                  .str("the value of '" + key + "' is not a number")
                  .framed());
      return true;
    }
    value += delta;
    const std::string text = std::to_string(value);
    kv[key] = std::vector<uint8_t>(text.begin(), text.end());
    send(c, ok().i64(value).framed());
    wake_waiters();
    return true;
  }

  bool serve_check(Conn& c, Reader& r) {
    const int64_t n = r.i64();
    if (n < 0 || n > 1 << 20) return false;
    bool all = true;
    for (int64_t i = 0; i < n && r.ok(); ++i) all = kv.count(r.str()) > 0 && all;
    if (!r.done()) return false;
    send(c, ok().u8(all ? 1 : 0).framed());
    return true;
  }

  bool serve_delete(Conn& c, Reader& r) {
    std::string key = r.str();
    if (!r.done()) return false;
    send(c, ok().u8(kv.erase(key) ? 1 : 0).framed());
    return true;
  }

  // c10d's semantics: a missing key is set only when the expected value is empty; the reply is
  // the value the key holds afterwards (the expected one when it is missing).
  bool serve_compare_set(Conn& c, Reader& r) {
    std::string key = r.str();
    auto expected = r.vec();
    auto desired = r.vec();
    if (!r.done()) return false;
    auto it = kv.find(key);
    if (it == kv.end()) {
      if (expected.empty()) {
        kv[key] = desired;
        send(c, ok().vec(desired).framed());
        wake_waiters();
      } else {
        send(c, ok().vec(expected).framed());
      }
    } else {
      if (it->second == expected) it->second = std::move(desired);
      send(c, ok().vec(it->second).framed());
      wake_waiters();
    }
    return true;
  }

  // Answers c's waiting request when its keys are all there.
  bool try_complete(Conn& c) {
    for (const auto& k : c.wait_keys)
      if (!kv.count(k)) return false;
    c.waiting = false;
    if (c.wait_op == Op::kGet)
      send(c, ok().vec(kv[c.wait_keys.front()]).framed());
    else
      send(c, ok().framed());
    c.wait_keys.clear();
    return true;
  }

  void wake_waiters() {
    for (auto& c : conns)
      if (c.waiting && !c.closing && try_complete(c)) serve_requests(c);
  }

  // Handshakes and waits past their deadline; returns the poll timeout until the next one.
  int expire() {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    for (auto& c : conns) {
      if (c.closing) continue;
      if (!c.ready) {
        if (now >= c.handshake_deadline) {
          const std::string ms = std::to_string(options.handshake_timeout.count());
          refuse(c, c.in.empty()
                        ? "it sent nothing within " + ms + " ms"
                        : "it sent " + std::to_string(c.in.size()) +
                              " bytes of the handshake, not all of it, within " + ms + " ms");
          continue;
        }
        next = std::min(next, c.handshake_deadline);
      } else if (c.partial) {
        if (now >= c.partial_since + options.request_timeout) {
          name_unfinished(c, "stalled for " + std::to_string(options.request_timeout.count()) +
                                 " ms in the middle of a request; closed");
          c.closing = true;
          continue;
        }
        next = std::min(next, c.partial_since + options.request_timeout);
      } else if (c.waiting && c.wait_has_deadline) {
        if (now >= c.wait_deadline) {
          c.waiting = false;
          c.wait_keys.clear();
          send(c, Writer().u8(static_cast<uint8_t>(Status::kTimeout)).framed());
          serve_requests(c);
          continue;
        }
        next = std::min(next, c.wait_deadline);
      }
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::max<long long>(0, ms));
  }

  // A failure here (no memory, no entropy) stops the store, never the process: its clients then
  // see the connection close, as if rank 0 had exited, and say so.
  void run() noexcept {
    try {
      serve();
      return;
    } catch (const std::exception& e) {
      note(options.name + " stopped: " + e.what());
    }
    // No new connection waits on a store that serves no more. (Not on a normal stop: the socket
    // may be accel launch's, which hands it to the next attempt's rank 0.)
    shutdown(listen_fd, SHUT_RDWR);
    for (auto& c : conns) shutdown(c.fd, SHUT_RDWR);
  }

  void serve() {
    std::vector<pollfd> fds;
    std::vector<Conn*> order;
    for (;;) {
      const int timeout = expire();
      for (auto it = conns.begin(); it != conns.end();) {
        if (it->closing) {
          close(it->fd);
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
      fds.assign({{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}});
      order.clear();
      for (auto& c : conns) {
        fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        order.push_back(&c);
      }
      const int n = poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) return;
      if (n <= 0) continue;
      if (fds[0].revents) {
        for (const auto& c : conns)
          if (c.partial && !c.closing)
            name_unfinished(c, "was still sending a request when the store stopped");
        return;
      }
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 0; i < order.size(); ++i) {
        Conn& c = *order[i];
        const short ev = fds[i + 2].revents;
        if (!ev || c.closing) continue;
        if (ev & POLLOUT) flush(c);
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
          read_from(c);
          if (!c.closing) serve_requests(c);
        }
      }
    }
  }
};

std::string socket_address(int fd, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    if (port) *port = ntohs(v4->sin_port);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    if (port) *port = ntohs(v6->sin6_port);
  }
  return host;
}

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<StoreServer> StoreServer::on_socket(int fd, ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->listen_fd = fd;
  impl->options = std::move(options);
  impl->address = socket_address(fd, &impl->port);
  if (listen(fd, 512) != 0)
    fail(Errc::rendezvous, sys_error("listen on the store's socket", errno));
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  if (pipe2(impl->wake, O_CLOEXEC | O_NONBLOCK) != 0) fail(Errc::io, sys_error("pipe2", errno));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

std::unique_ptr<StoreServer> StoreServer::bind(const std::string& address, int port,
                                               ServerOptions options) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int gai = getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0)
    fail(Errc::rendezvous,
         "the store's address '" + address + "' does not resolve: " + gai_strerror(gai));
  std::string why;
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (ai->ai_family == AF_INET6) {
      // "::" asked for every interface: both families, as an IPv4 "0.0.0.0" would not.
      const int off = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      freeaddrinfo(found);
      return on_socket(fd, std::move(options));
    }
    const int err = errno;
    why = err == EADDRINUSE      ? "port " + std::to_string(port) + " is in use"
          : err == EADDRNOTAVAIL ? "'" + address + "' is not an address of this machine"
                                 : sys_error("bind", err);
    close(fd);
  }
  freeaddrinfo(found);
  fail(Errc::rendezvous,
       "cannot open the rendezvous store on " + address + ":" + std::to_string(port) + ": " + why);
}

StoreServer::~StoreServer() = default;

int StoreServer::port() const {
  return impl_->port;
}
const std::string& StoreServer::address() const {
  return impl_->address;
}
uint64_t StoreServer::refused() const {
  return impl_->refused.load();
}

}  // namespace accel::store
