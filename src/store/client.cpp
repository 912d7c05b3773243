#include "store/client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "security/random.hpp"
#include "store/wire.hpp"

namespace accel::store {

namespace {

using Clock = std::chrono::steady_clock;

// How long the server has to answer a request beyond the time it may hold it.
constexpr std::chrono::seconds kAnswerGrace{30};

// Reads exactly `size` bytes by `deadline`: 1 done, 0 the peer closed, -1 timed out, -2 error.
int read_all(int fd, char* out, size_t size, Clock::time_point deadline, bool no_deadline) {
  size_t got = 0;
  while (got < size) {
    int wait_ms = -1;
    if (!no_deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return -1;
      wait_ms = static_cast<int>(std::min<long long>(left.count(), 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    const int n = poll(&p, 1, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -2;
    if (n == 0) return -1;
    const ssize_t r = recv(fd, out + got, size - got, 0);
    if (r == 0) return 0;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno == ECONNRESET ? 0 : -2;
    }
    got += static_cast<size_t>(r);
  }
  return 1;
}

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A connected socket to host:port, or -1 when nothing listens there yet.
int try_connect(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    fail(Errc::rendezvous, "the rendezvous address '" + host + "' does not resolve");
  int out = -1;
  for (addrinfo* ai = found; ai && out < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      out = fd;
    } else {
      close(fd);
    }
  }
  freeaddrinfo(found);
  return out;
}

[[noreturn]] void lost(const std::string& endpoint, const std::string& how,
                       const std::string& what) {
  fail(Errc::peer_failed, "the rendezvous store at " + endpoint + " " + how + " during " + what +
                              " (Connection closed by peer)");
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 4; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 4) out += ", ...";
  return out;
}

}  // namespace

TokenStore::TokenStore(std::string host, int port, std::string token,
                       std::chrono::milliseconds timeout, Clock::time_point deadline)
    : c10d::Store(timeout), host_(std::move(host)), port_(port), token_(std::move(token)) {
  connect_and_prove(deadline);
}

TokenStore::~TokenStore() {
  if (fd_ >= 0) close(fd_);
}

void TokenStore::connect_and_prove(Clock::time_point deadline) {
  int refusals = 0;
  for (;;) {
    const int fd = try_connect(host_, port_);
    if (fd < 0) {
      if (Clock::now() >= deadline)
        fail(Errc::rendezvous, "nothing listened at " + endpoint() + " (Connection refused)");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    // The server speaks first; a store of another kind (torch's TCPStore) says nothing.
    const auto answer_by = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    char hello[kServerHelloBytes];
    const int got = read_all(fd, hello, sizeof hello, answer_by, false);
    if (got != 1 || std::memcmp(hello, kServerHello, 8) != 0) {
      close(fd);
      if (got == 0 && Clock::now() < deadline) {  // closed at once: a server going down
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      fail(Errc::rendezvous,
           "what listens at " + endpoint() + " is not libaccel's rendezvous store (" +
               (got == 1 ? "it answered something else" : "it did not greet within 10 s") +
               "): another program on that port, or a store hosted by a launcher that is not "
               "libaccel's (set TORCHELASTIC_USE_AGENT_STORE=1 if torchrun's agent hosts it)");
    }
    uint8_t nonce[kNonceBytes];
    try {
      security::random_bytes(nonce, sizeof nonce);
    } catch (...) {
      close(fd);
      throw;
    }
    const auto* server_nonce = reinterpret_cast<const uint8_t*>(hello + 8);
    const auto proof = client_proof(token_, server_nonce, nonce);
    std::string mine(kClientHello, 8);
    mine.append(reinterpret_cast<const char*>(nonce), kNonceBytes);
    mine.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    char theirs[32];
    const int answered =
        write_all(fd, mine) ? read_all(fd, theirs, sizeof theirs, answer_by, false) : 0;
    if (answered != 1) {
      close(fd);
      // A refusal closes the connection: a wrong token, or a handshake slower than the server's
      // deadline (a loaded machine), which a new connection retries.
      if (++refusals < 3 && Clock::now() < deadline) continue;
      fail(Errc::rendezvous,
           "the rendezvous store at " + endpoint() +
               " refused this rank's proof of the job token: the ranks were given different "
               "ACCEL_JOB_TOKEN values (or one rank none)");
    }
    const auto expected = server_proof(token_, server_nonce, nonce);
    if (!security::digests_equal(expected.data(), reinterpret_cast<const uint8_t*>(theirs),
                                 expected.size())) {
      close(fd);
      fail(Errc::rendezvous, "the rendezvous store at " + endpoint() +
                                 " could not prove this job's token: it is another job's store, "
                                 "or it was given another ACCEL_JOB_TOKEN");
    }
    fd_ = fd;
    return;
  }
}

std::string TokenStore::call(const std::string& request, std::chrono::milliseconds wait,
                             const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) lost(endpoint(), "was lost earlier", what);
  if (!write_all(fd_, request)) lost(endpoint(), "closed the connection", what);
  const bool forever = wait.count() <= 0;
  const auto deadline = Clock::now() + wait + kAnswerGrace;
  char head[4];
  int got = read_all(fd_, head, 4, deadline, forever);
  const uint32_t len = got == 1 ? read_u32(head) : 0;
  if (got == 1 && (len == 0 || len > kMaxMessage)) got = -2;
  std::string body(len, '\0');
  if (got == 1) got = read_all(fd_, body.data(), len, deadline, forever);
  if (got != 1) {
    close(fd_);
    fd_ = -1;
    if (got == -1)
      fail(Errc::timeout,
           "Timed out: the rendezvous store at " + endpoint() + " did not answer " + what);
    lost(endpoint(), got == 0 ? "closed the connection" : "sent a malformed reply", what);
  }
  const auto status = static_cast<Status>(static_cast<uint8_t>(body[0]));
  if (status == Status::kTimeout)
    fail(Errc::timeout, "Timed out after " + std::to_string(wait.count()) + " ms waiting for " +
                            what + " in the rendezvous store at " + endpoint());
  if (status != Status::kOk) {
    Reader r(body.data() + 1, body.size() - 1);
    fail(Errc::internal,
         "the rendezvous store at " + endpoint() + " rejected " + what + ": " + r.str());
  }
  return body.substr(1);
}

void TokenStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  call(Writer().u8(uint8_t(Op::kSet)).str(key).vec(value).framed(), {}, "set('" + key + "')");
}

std::vector<uint8_t> TokenStore::compareSet(const std::string& key,
                                            const std::vector<uint8_t>& expected,
                                            const std::vector<uint8_t>& desired) {
  const std::string body =
      call(Writer().u8(uint8_t(Op::kCompareSet)).str(key).vec(expected).vec(desired).framed(), {},
           "compareSet('" + key + "')");
  Reader r(body.data(), body.size());
  return r.vec();
}

std::vector<uint8_t> TokenStore::get(const std::string& key) {
  const std::string body =
      call(Writer().u8(uint8_t(Op::kGet)).str(key).i64(timeout_.count()).framed(), timeout_,
           "key '" + key + "'");
  Reader r(body.data(), body.size());
  return r.vec();
}

int64_t TokenStore::add(const std::string& key, int64_t value) {
  const std::string body =
      call(Writer().u8(uint8_t(Op::kAdd)).str(key).i64(value).framed(), {}, "add('" + key + "')");
  Reader r(body.data(), body.size());
  return r.i64();
}

bool TokenStore::deleteKey(const std::string& key) {
  const std::string body =
      call(Writer().u8(uint8_t(Op::kDelete)).str(key).framed(), {}, "deleteKey('" + key + "')");
  return !body.empty() && body[0] == 1;
}

bool TokenStore::check(const std::vector<std::string>& keys) {
  Writer w;
  w.u8(uint8_t(Op::kCheck)).i64(static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const std::string body = call(w.framed(), {}, "check(" + key_list(keys) + ")");
  return !body.empty() && body[0] == 1;
}

int64_t TokenStore::getNumKeys() {
  const std::string body = call(Writer().u8(uint8_t(Op::kNumKeys)).framed(), {}, "getNumKeys");
  Reader r(body.data(), body.size());
  return r.i64();
}

void TokenStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void TokenStore::wait(const std::vector<std::string>& keys,
                      const std::chrono::milliseconds& timeout) {
  Writer w;
  w.u8(uint8_t(Op::kWait)).i64(static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count());
  call(w.framed(), timeout, "key" + std::string(keys.size() > 1 ? "s " : " ") + key_list(keys));
}

#if ACCEL_TORCH2
c10::intrusive_ptr<c10d::Store> TokenStore::clone() {
  return c10::make_intrusive<TokenStore>(host_, port_, token_, timeout_, Clock::now() + timeout_);
}
#endif

}  // namespace accel::store
