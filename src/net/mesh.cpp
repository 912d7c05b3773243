#include "net/mesh.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "security/random.hpp"
#include "security/sha256.hpp"

namespace accel::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kAcceptorHello[8] = {'A', 'C', 'C', 'E', 'L', 'N', 'S', '1'};
constexpr char kConnectorHello[8] = {'A', 'C', 'C', 'E', 'L', 'N', 'C', '1'};
constexpr size_t kNonce = 16;
constexpr size_t kAcceptorHelloBytes = 8 + 4 + kNonce;
constexpr size_t kConnectorHelloBytes = 8 + 4 + kNonce + 32;
// Handshakes in progress at once: the ranks above this one and some strangers; more are refused.
constexpr size_t kMaxPending = 64;
constexpr uint64_t kLoggedRefusals = 20;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Each side proves the key over both ranks and both nonces, under its own label, so that neither
// proof can be replayed as the other's or on another pair.
security::Digest proof(const std::string& key, const char* label, int acceptor, int connector,
                       const uint8_t* acceptor_nonce, const uint8_t* connector_nonce) {
  std::string msg = label;
  uint8_t ranks[8];
  put_u32(ranks, static_cast<uint32_t>(acceptor));
  put_u32(ranks + 4, static_cast<uint32_t>(connector));
  msg.append(reinterpret_cast<const char*>(ranks), 8);
  msg.append(reinterpret_cast<const char*>(acceptor_nonce), kNonce);
  msg.append(reinterpret_cast<const char*>(connector_nonce), kNonce);
  return security::hmac_sha256(key, msg);
}

std::string numeric_address(const sockaddr* sa, socklen_t len, bool with_port) {
  char host[INET6_ADDRSTRLEN] = "?";
  char port[8] = "";
  getnameinfo(sa, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
  return with_port ? std::string(host) + ":" + port : std::string(host);
}

addrinfo* resolve(const std::string& address, int port, bool passive) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || !found)
    fail(Errc::rendezvous, "the address '" + address + "' is not numeric: " + gai_strerror(rc));
  return found;
}

// Writes or reads exactly `size` bytes of a non-blocking socket by the deadline; false when the
// peer closed, failed or the deadline passed (errno says which: 0 for a close).
bool move_exact(int fd, uint8_t* data, size_t size, bool sending, Clock::time_point deadline) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = sending ? send(fd, data + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                              : recv(fd, data + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !sending) {
      errno = 0;
      return false;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 1000)));
  }
  return true;
}

}  // namespace

std::vector<int> ring_peers(int rank, int size, bool connecting) {
  std::vector<int> out;
  if (size < 2) return out;
  for (int peer : {(rank + size - 1) % size, (rank + 1) % size}) {
    const bool mine = connecting ? peer < rank : peer > rank;
    if (mine && std::find(out.begin(), out.end(), peer) == out.end()) out.push_back(peer);
  }
  return out;
}

namespace {

class Listener {
 public:
  Listener(const MeshSetup& setup, std::map<int, Link>& accepted)
      : setup_(setup), accepted_(accepted) {
    addrinfo* ai = resolve(setup.listen_address, 0, true);
    fd_ = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int err = fd_ < 0                                                                ? errno
                    : bind(fd_, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd_, 128) != 0 ? errno
                                                                                           : 0;
    freeaddrinfo(ai);
    if (err != 0)
      fail(Errc::rendezvous, "rank " + std::to_string(setup.rank) +
                                 " could not listen for its peers' connections on " +
                                 setup.listen_address + ": " + std::strerror(err));
    sockaddr_storage at{};
    socklen_t len = sizeof at;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &len);
    port_ = ntohs(at.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&at)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&at)->sin_port);
  }
  ~Listener() {
    for (auto& p : pending_) close(p.fd);
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

  // Accepts until the neighbours above this rank have connected, the deadline passes or `stop` is
  // set.
  // Returns what went wrong ("" when they all connected).
  std::string run(const std::atomic<bool>& stop) {
    const size_t expected = ring_peers(setup_.rank, setup_.size, false).size();
    while (accepted_.size() < expected) {
      if (stop.load()) return "stopped";
      const auto now = Clock::now();
      if (now >= setup_.deadline) return missing_ranks();
      expire(now);
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      auto next = std::min(setup_.deadline, now + std::chrono::milliseconds(50));
      for (const auto& p : pending_) {
        fds.push_back({p.fd, POLLIN, 0});
        next = std::min(next, p.deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
      poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait.count(), 0) + 1));
      for (size_t i = fds.size(); i-- > 1;)
        if (fds[i].revents) read_handshake(i - 1);
      if (fds[0].revents & POLLIN) accept_all();
    }
    // The neighbours are in: whatever else is at the door is a stranger, told so before it closes.
    accept_all();
    for (size_t i = pending_.size(); i-- > 0;)
      refuse(i, "the ranks it waited for had connected; this listener closes now");
    return "";
  }

 private:
  struct Pending {
    int fd;
    std::string peer;
    uint8_t nonce[kNonce];
    uint8_t in[kConnectorHelloBytes];
    size_t got = 0;
    Clock::time_point deadline;
  };

  void accept_all() {
    for (;;) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      const int fd =
          accept4(fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      Pending p;
      p.fd = fd;
      p.peer = numeric_address(reinterpret_cast<sockaddr*>(&a), len, true);
      p.deadline = Clock::now() + setup_.handshake_timeout;
      pending_.push_back(p);
      if (pending_.size() > kMaxPending) {
        refuse(pending_.size() - 1, "too many connections are being set up at once");
        continue;
      }
      security::random_bytes(pending_.back().nonce, kNonce);
      uint8_t hello[kAcceptorHelloBytes];
      std::memcpy(hello, kAcceptorHello, 8);
      put_u32(hello + 8, static_cast<uint32_t>(setup_.rank));
      std::memcpy(hello + 12, pending_.back().nonce, kNonce);
      if (send(fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) !=
          static_cast<ssize_t>(sizeof hello))
        refuse(pending_.size() - 1, "it went away before the handshake");
    }
  }

  void expire(Clock::time_point now) {
    for (size_t i = pending_.size(); i-- > 0;)
      if (now >= pending_[i].deadline)
        refuse(i, "it did not complete the handshake within " +
                      format_real(static_cast<double>(setup_.handshake_timeout.count()) / 1000) +
                      " s (sent " + std::to_string(pending_[i].got) + " of its " +
                      std::to_string(kConnectorHelloBytes) + " bytes)");
  }

  void read_handshake(size_t i) {
    Pending& p = pending_[i];
    const ssize_t n = recv(p.fd, p.in + p.got, sizeof p.in - p.got, MSG_DONTWAIT);
    if (n == 0) return refuse(i, "it closed the connection during the handshake");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return refuse(i, sys_error("it failed during the handshake", errno));
    }
    p.got += static_cast<size_t>(n);
    if (std::memcmp(p.in, kConnectorHello, std::min<size_t>(p.got, 8)) != 0)
      return refuse(i, "it does not speak libaccel's collective protocol (first bytes " +
                           security::to_hex(p.in, std::min<size_t>(p.got, 8)) + ")");
    if (p.got < sizeof p.in) return;
    const auto claimed = static_cast<int>(get_u32(p.in + 8));
    const auto from = ring_peers(setup_.rank, setup_.size, false);
    if (std::find(from.begin(), from.end(), claimed) == from.end())
      return refuse(i, "it claims to be rank " + std::to_string(static_cast<uint32_t>(claimed)) +
                           ", which does not connect to this rank");
    const auto expected =
        proof(setup_.key, "accel collectives connector ", setup_.rank, claimed, p.nonce, p.in + 12);
    if (!security::digests_equal(expected.data(), p.in + 12 + kNonce, 32))
      return refuse(i,
                    "its proof of the job token is wrong (a process that is not a rank of this "
                    "job, or a rank started with another ACCEL_JOB_TOKEN)");
    if (accepted_.count(claimed))
      return refuse(i, "rank " + std::to_string(claimed) + " is connected already");
    const auto mine =
        proof(setup_.key, "accel collectives acceptor ", setup_.rank, claimed, p.nonce, p.in + 12);
    if (send(p.fd, mine.data(), mine.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != 32)
      return refuse(i, "it went away during the handshake");
    const std::string address = p.peer.substr(0, p.peer.rfind(':'));
    accepted_.emplace(claimed, Link(p.fd, claimed, address));
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void refuse(size_t i, const std::string& reason) {
    close(pending_[i].fd);
    const uint64_t n = ++refused_;
    if (setup_.refused && (n <= kLoggedRefusals || n % 100 == 0))
      setup_.refused(setup_.name + " refused a connection from " + pending_[i].peer + ": " +
                     reason +
                     (n > kLoggedRefusals ? " (" + std::to_string(n) + " refused so far)" : ""));
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  std::string missing_ranks() const {
    std::string out;
    for (int r : ring_peers(setup_.rank, setup_.size, false))
      if (!accepted_.count(r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return "rank(s) " + out + " did not connect to rank " + std::to_string(setup_.rank) +
           " by the rendezvous deadline";
  }

  const MeshSetup& setup_;
  std::map<int, Link>& accepted_;
  int fd_ = -1;
  int port_ = 0;
  std::vector<Pending> pending_;
  uint64_t refused_ = 0;
};

// Connects to rank `peer` at its published "address port" and completes the handshake.
Link connect_to(const MeshSetup& setup, int peer, const std::string& published) {
  const auto space = published.rfind(' ');
  long long port = 0;
  if (space == std::string::npos || !parse_int(published.substr(space + 1), &port))
    fail(Errc::rendezvous,
         "rank " + std::to_string(peer) + " published a malformed address '" + published + "'");
  const std::string address = published.substr(0, space);
  const std::string where =
      "rank " + std::to_string(peer) + " at " + address + ":" + std::to_string(port);
  auto refused = [&](const std::string& why) {
    fail(Errc::rendezvous, "rank " + std::to_string(setup.rank) + " could not connect to " + where +
                               " for collectives: " + why);
  };
  addrinfo* ai = resolve(address, static_cast<int>(port), false);
  int fd = -1;
  for (;;) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    const int err = errno;
    if (fd >= 0) close(fd);
    if (err != ECONNREFUSED || Clock::now() >= setup.deadline) {
      freeaddrinfo(ai);
      refused(std::strerror(err));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  freeaddrinfo(ai);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  struct Closer {
    int& fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  } closer{fd};
  const auto deadline = std::min(setup.deadline, Clock::now() + 10 * setup.handshake_timeout);
  uint8_t hello[kAcceptorHelloBytes];
  if (!move_exact(fd, hello, sizeof hello, false, deadline))
    refused("it sent no handshake (" + std::string(errno ? std::strerror(errno) : "closed") + ")");
  if (std::memcmp(hello, kAcceptorHello, 8) != 0 ||
      get_u32(hello + 8) != static_cast<uint32_t>(peer))
    refused("what listens there is not rank " + std::to_string(peer) + " of this job");
  uint8_t mine[kConnectorHelloBytes];
  std::memcpy(mine, kConnectorHello, 8);
  put_u32(mine + 8, static_cast<uint32_t>(setup.rank));
  security::random_bytes(mine + 12, kNonce);
  const auto my_proof =
      proof(setup.key, "accel collectives connector ", peer, setup.rank, hello + 12, mine + 12);
  std::memcpy(mine + 12 + kNonce, my_proof.data(), 32);
  uint8_t theirs[32];
  if (!move_exact(fd, mine, sizeof mine, true, deadline) ||
      !move_exact(fd, theirs, sizeof theirs, false, deadline))
    refused(
        "it refused this rank's proof of the job token (do all ranks have the same "
        "ACCEL_JOB_TOKEN?)");
  const auto expected =
      proof(setup.key, "accel collectives acceptor ", peer, setup.rank, hello + 12, mine + 12);
  if (!security::digests_equal(expected.data(), theirs, 32))
    refused("it did not prove the job token: it is not rank " + std::to_string(peer) +
            " of this job");
  Link link(fd, peer, address);
  fd = -1;
  return link;
}

}  // namespace

std::string mesh_key(const std::string& job_token, const std::string& session) {
  const auto d = security::hmac_sha256(job_token, "accel collectives key " + session);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::vector<Link> form_mesh(const MeshSetup& setup) {
  std::vector<Link> links(static_cast<size_t>(setup.size));
  if (setup.size == 1) return links;
  std::map<int, Link> accepted;
  std::unique_ptr<Listener> listener;
  std::string listen_error;
  std::atomic<bool> stop{false};
  std::thread acceptor;
  if (!ring_peers(setup.rank, setup.size, false).empty()) {
    listener = std::make_unique<Listener>(setup, accepted);
    setup.publish(setup.listen_address + " " + std::to_string(listener->port()));
    acceptor = std::thread([&] {
      try {
        listen_error = listener->run(stop);
      } catch (const std::exception& e) {
        listen_error = e.what();
      }
    });
  }
  std::string connect_error;
  try {
    for (int r : ring_peers(setup.rank, setup.size, true))
      links[static_cast<size_t>(r)] = connect_to(setup, r, setup.lookup(r));
  } catch (const std::exception& e) {
    connect_error = e.what();
    stop = true;
  }
  if (acceptor.joinable()) acceptor.join();
  listener.reset();  // the door closes
  if (!connect_error.empty()) fail(Errc::rendezvous, connect_error);
  if (!listen_error.empty()) fail(Errc::rendezvous, listen_error);
  for (auto& [r, link] : accepted) links[static_cast<size_t>(r)] = std::move(link);
  return links;
}

}  // namespace accel::net
