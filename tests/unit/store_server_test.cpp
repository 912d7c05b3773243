// libaccel's rendezvous store server from raw sockets: the protocol's operations for a client
// that proves the job token, and every stranger refused, logged, and harmless to the rest. Also
// the hashes under the proofs (published test vectors), the token's sources, and where the store
// listens.
#include "store/server.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "security/job_token.hpp"
#include "security/sha256.hpp"
#include "store/endpoint.hpp"
#include "store/wire.hpp"

using namespace accel::store;
using accel::security::Digest;
using Clock = std::chrono::steady_clock;

namespace {

std::string hex(const Digest& d) {
  return accel::security::to_hex(d.data(), d.size());
}

TEST(Sha256, PublishedVectors) {
  EXPECT_EQ(hex(accel::security::sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(accel::security::sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      hex(accel::security::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(accel::security::sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, HmacRfc4231Vectors) {
  EXPECT_EQ(hex(accel::security::hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(accel::security::hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(
      hex(accel::security::hmac_sha256(std::string(131, '\xaa'),
                                       "Test Using Larger Than Block-Size Key - Hash Key First")),
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(JobToken, ReadFromTheEnvironmentOrAFile) {
  using accel::security::read_job_token;
  EXPECT_FALSE(read_job_token({}).present());
  auto t = read_job_token({{"ACCEL_JOB_TOKEN", "s3cret"}});
  EXPECT_EQ(t.secret, "s3cret");
  EXPECT_EQ(t.source, "ACCEL_JOB_TOKEN");
  const std::string path = testing::TempDir() + "/accel_token_test";
  std::ofstream(path) << "from-a-file\r\nsecond line\n";
  t = read_job_token({{"ACCEL_JOB_TOKEN_FILE", path}});
  EXPECT_EQ(t.secret, "from-a-file");
  EXPECT_NE(t.source.find(path), std::string::npos);
  for (const accel::config::EnvMap& bad :
       {accel::config::EnvMap{{"ACCEL_JOB_TOKEN", ""}},
        accel::config::EnvMap{{"ACCEL_JOB_TOKEN", "a"}, {"ACCEL_JOB_TOKEN_FILE", path}},
        accel::config::EnvMap{{"ACCEL_JOB_TOKEN_FILE", path + ".missing"}}}) {
    try {
      read_job_token(bad);
      ADD_FAILURE() << "accepted a bad token setting";
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.code(), accel::Errc::config);
      EXPECT_NE(std::string(e.what()).find("ACCEL_JOB_TOKEN"), std::string::npos) << e.what();
    }
  }
  std::remove(path.c_str());
}

TEST(JobToken, NewTokensDifferAndThePrefixHidesTheSecret) {
  const std::string a = accel::security::new_job_token(), b = accel::security::new_job_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  const auto pa = accel::security::token_key_prefix({a, "x"});
  EXPECT_EQ(pa, accel::security::token_key_prefix({a, "y"}));
  EXPECT_NE(pa, accel::security::token_key_prefix({b, "x"}));
  EXPECT_EQ(pa.find(a.substr(0, 8)), std::string::npos);
  EXPECT_EQ(accel::security::token_key_prefix({"", ""}), "");
}

TEST(StoreEndpoint, LoopbackForOneMachineThePeersAddressOtherwise) {
  auto e = store_endpoint("127.0.0.1", true, "");
  EXPECT_EQ(e.listen, "127.0.0.1");
  EXPECT_EQ(e.connect, "127.0.0.1");
  e = store_endpoint("localhost", true, "");  // every rank here: loopback whatever the name
  EXPECT_EQ(e.listen, "127.0.0.1");
  e = store_endpoint("10.231.7.1", false, "");
  EXPECT_EQ(e.listen, "10.231.7.1");
  EXPECT_EQ(e.connect, "10.231.7.1");
  EXPECT_TRUE(e.note.empty());
  e = store_endpoint("127.0.0.1", false, "");  // a loopback address given as such stays
  EXPECT_EQ(e.listen, "127.0.0.1");
  e = store_endpoint("10.231.7.1", false, "0.0.0.0");  // asked for: every interface
  EXPECT_EQ(e.listen, "0.0.0.0");
  EXPECT_EQ(e.connect, "10.231.7.1");
  e = store_endpoint("127.0.0.1", true, "::");
  EXPECT_EQ(e.connect, "::1");
  EXPECT_EQ(local_connect_address("0.0.0.0"), "127.0.0.1");
}

// A client of the protocol, written from wire.hpp alone.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    sockaddr_in local{};
    socklen_t len = sizeof local;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len);
    local_port_ = ntohs(local.sin_port);
  }
  ~RawClient() { close(fd_); }
  int local_port() const { return local_port_; }
  void send_bytes(const std::string& b) {
    ASSERT_EQ(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL), (ssize_t)b.size());
  }
  // Reads exactly n bytes; false when the server closed first.
  bool read_bytes(size_t n, std::string* out,
                  std::chrono::milliseconds within = std::chrono::seconds(10)) {
    out->clear();
    const auto until = Clock::now() + within;
    while (out->size() < n) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t r = recv(fd_, buf, std::min(sizeof buf, n - out->size()), 0);
      if (r <= 0) return false;
      out->append(buf, static_cast<size_t>(r));
    }
    return true;
  }
  // Seconds until the server closes this connection (reading and dropping what it sends).
  double seconds_until_closed(double limit = 5) {
    const auto start = Clock::now();
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[256];
        if (recv(fd_, buf, sizeof buf, 0) <= 0) break;
      }
      if (std::chrono::duration<double>(Clock::now() - start).count() > limit) return 1e9;
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  bool prove(const std::string& token) {
    std::string hello;
    if (!read_bytes(kServerHelloBytes, &hello)) return false;
    EXPECT_EQ(hello.substr(0, 8), std::string(kServerHello, 8));
    uint8_t nonce[kNonceBytes];
    for (size_t i = 0; i < kNonceBytes; ++i) nonce[i] = static_cast<uint8_t>(i * 7 + 1);
    const auto* sn = reinterpret_cast<const uint8_t*>(hello.data() + 8);
    const auto proof = client_proof(token, sn, nonce);
    send_bytes(std::string(kClientHello, 8) +
               std::string(reinterpret_cast<char*>(nonce), kNonceBytes) +
               std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
    std::string theirs;
    if (!read_bytes(32, &theirs)) return false;
    const auto expected = server_proof(token, sn, nonce);
    return std::memcmp(theirs.data(), expected.data(), 32) == 0;
  }
  // One request; the reply's body (status byte first), or "" when the connection closed.
  std::string call(const Writer& w) {
    send_bytes(w.framed());
    std::string head, body;
    if (!read_bytes(4, &head)) return "";
    if (!read_bytes(read_u32(head.data()), &body)) return "";
    return body;
  }

 private:
  int fd_ = -1;
  int local_port_ = 0;
};

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

class StoreServerTest : public testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.token = "the job's secret";
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(line);
    };
    server_ = StoreServer::bind("127.0.0.1", 0, std::move(o));
  }
  // The server first: its thread logs into the members below until it stops.
  void TearDown() override { server_.reset(); }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  // The log line naming a connection from this local port, waiting a moment for it.
  std::string line_for(int port) {
    const std::string needle = "127.0.0.1:" + std::to_string(port) + ":";
    for (int i = 0; i < 100; ++i) {
      for (const auto& l : log())
        if (l.find(needle) != std::string::npos) return l;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "";
  }
  std::unique_ptr<StoreServer> server_;
  std::mutex mu_;
  std::vector<std::string> log_;
};

TEST_F(StoreServerTest, ListensOnTheAddressAskedOnly) {
  EXPECT_EQ(server_->address(), "127.0.0.1");
  EXPECT_GT(server_->port(), 0);
}

TEST_F(StoreServerTest, ServesEveryOperationToAClientWithTheToken) {
  RawClient c(server_->port());
  ASSERT_TRUE(c.prove("the job's secret"));
  const auto ok = std::string(1, '\0');
  EXPECT_EQ(c.call(Writer().u8(uint8_t(Op::kSet)).str("k").vec(bytes("v1"))), ok);
  std::string r = c.call(Writer().u8(uint8_t(Op::kGet)).str("k").i64(1000));
  Reader get(r.data() + 1, r.size() - 1);
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(get.str(), "v1");
  r = c.call(Writer().u8(uint8_t(Op::kAdd)).str("n").i64(5));
  EXPECT_EQ(Reader(r.data() + 1, 8).i64(), 5);
  r = c.call(Writer().u8(uint8_t(Op::kAdd)).str("n").i64(-2));
  EXPECT_EQ(Reader(r.data() + 1, 8).i64(), 3);
  r = c.call(Writer().u8(uint8_t(Op::kCheck)).i64(2).str("k").str("n"));
  EXPECT_EQ(r, ok + std::string(1, '\1'));
  r = c.call(Writer().u8(uint8_t(Op::kCheck)).i64(2).str("k").str("absent"));
  EXPECT_EQ(r, ok + std::string(1, '\0'));
  r = c.call(Writer().u8(uint8_t(Op::kNumKeys)));
  EXPECT_EQ(Reader(r.data() + 1, 8).i64(), 2);
  r = c.call(Writer().u8(uint8_t(Op::kCompareSet)).str("k").vec(bytes("v1")).vec(bytes("v2")));
  EXPECT_EQ(Reader(r.data() + 1, r.size() - 1).str(), "v2");
  r = c.call(Writer().u8(uint8_t(Op::kCompareSet)).str("k").vec(bytes("no")).vec(bytes("v3")));
  EXPECT_EQ(Reader(r.data() + 1, r.size() - 1).str(), "v2");
  r = c.call(Writer().u8(uint8_t(Op::kDelete)).str("k"));
  EXPECT_EQ(r, ok + std::string(1, '\1'));
  r = c.call(Writer().u8(uint8_t(Op::kDelete)).str("k"));
  EXPECT_EQ(r, ok + std::string(1, '\0'));
  // A wait that times out says so, and the connection goes on.
  const auto t0 = Clock::now();
  r = c.call(Writer().u8(uint8_t(Op::kWait)).i64(1).str("never").i64(200));
  EXPECT_EQ(r, std::string(1, '\1'));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(190));
  EXPECT_EQ(c.call(Writer().u8(uint8_t(Op::kSet)).str("after").vec({})), ok);
  // A malformed request is answered as such.
  r = c.call(Writer().u8(99));
  EXPECT_EQ(r[0], 2);
  EXPECT_TRUE(log().empty());
}

TEST_F(StoreServerTest, AGetWaitsForAnotherClientsSet) {
  RawClient waiter(server_->port()), setter(server_->port());
  ASSERT_TRUE(waiter.prove("the job's secret"));
  ASSERT_TRUE(setter.prove("the job's secret"));
  std::string got;
  std::thread t([&] { got = waiter.call(Writer().u8(uint8_t(Op::kGet)).str("late").i64(0)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(setter.call(Writer().u8(uint8_t(Op::kSet)).str("late").vec(bytes("here"))),
            std::string(1, '\0'));
  t.join();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(Reader(got.data() + 1, got.size() - 1).str(), "here");
}

// Each kind of stranger: closed within a second, named in the log by its address, and the
// clients with the token (one connected before, one after) served as if nothing happened.
TEST_F(StoreServerTest, StrangersAreRefusedLoggedAndHarmless) {
  RawClient before(server_->port());
  ASSERT_TRUE(before.prove("the job's secret"));
  ASSERT_EQ(before.call(Writer().u8(uint8_t(Op::kSet)).str("census/0").vec(bytes("1"))),
            std::string(1, '\0'));
  struct Case {
    const char* what;
    std::function<void(RawClient&)> act;
    const char* logged;
  };
  std::string big(4, '\0');
  big[0] = big[1] = big[2] = '\xff';
  big[3] = '\x7f';
  const std::vector<Case> cases = {
      {"nothing", [](RawClient&) {}, "sent nothing within"},
      {"garbage", [](RawClient& c) { c.send_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); },
       "not libaccel's handshake"},
      {"an oversized length", [&](RawClient& c) { c.send_bytes(big + "xxxx"); },
       "not libaccel's handshake"},
      {"a store request without the handshake",
       [](RawClient& c) {
         c.send_bytes(Writer().u8(uint8_t(Op::kGet)).str("census/0").i64(0).framed());
       },
       "not libaccel's handshake"},
      {"a wrong token", [](RawClient& c) { EXPECT_FALSE(c.prove("a guess")); },
       "proof of the job token is wrong"},
      {"half a handshake", [](RawClient& c) { c.send_bytes(std::string(kClientHello, 8) + "abc"); },
       "not all of it"},
  };
  for (const auto& k : cases) {
    RawClient stranger(server_->port());
    k.act(stranger);
    const double s = stranger.seconds_until_closed();
    EXPECT_LT(s, 1.0) << k.what;
    const std::string line = line_for(stranger.local_port());
    EXPECT_NE(line.find(k.logged), std::string::npos) << k.what << ": " << line;
  }
  // A stranger that proved nothing never reached the keys.
  RawClient after(server_->port());
  ASSERT_TRUE(after.prove("the job's secret"));
  const std::string r = after.call(Writer().u8(uint8_t(Op::kNumKeys)));
  EXPECT_EQ(Reader(r.data() + 1, 8).i64(), 1);
  EXPECT_EQ(before.call(Writer().u8(uint8_t(Op::kAdd)).str("census/acks").i64(1)).size(), 9u);
  EXPECT_EQ(server_->refused(), cases.size());
}

TEST_F(StoreServerTest, AClientWithTheTokenIsServedWhileStrangersHoldConnections) {
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(std::make_unique<RawClient>(server_->port()));
  RawClient c(server_->port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.prove("the job's secret"));
  EXPECT_EQ(c.call(Writer().u8(uint8_t(Op::kSet)).str("k").vec({})), std::string(1, '\0'));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
}

TEST_F(StoreServerTest, AnOversizedRequestAfterTheHandshakeClosesThatConnectionOnly) {
  RawClient c(server_->port()), other(server_->port());
  ASSERT_TRUE(c.prove("the job's secret"));
  ASSERT_TRUE(other.prove("the job's secret"));
  std::string big(4, '\xff');
  c.send_bytes(big);
  EXPECT_LT(c.seconds_until_closed(), 1.0);
  EXPECT_NE(line_for(c.local_port()).find("bytes (the limit is"), std::string::npos);
  EXPECT_EQ(other.call(Writer().u8(uint8_t(Op::kNumKeys))).size(), 9u);
}

// A client that proved the token and left a request unfinished is named: when it closes, when it
// stalls past request_timeout (closed then), and when the store stops under it; others are served
// meanwhile, and none of it counts as a refused stranger.
TEST(StoreServer, AClientWithTheTokenLeavingARequestUnfinishedIsNamed) {
  std::mutex mu;
  std::vector<std::string> lines;
  ServerOptions o;
  o.token = "the job's secret";
  o.request_timeout = std::chrono::milliseconds(300);
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  auto server = StoreServer::bind("127.0.0.1", 0, std::move(o));
  auto line_for = [&](int port) {
    const std::string needle = "127.0.0.1:" + std::to_string(port) + " ";
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& l : lines)
          if (l.find(needle) != std::string::npos) return l;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::string();
  };
  const std::string request = Writer().u8(uint8_t(Op::kSet)).str("key").vec(bytes("v")).framed();
  int closed_port = 0;
  {
    RawClient closed(server->port());
    ASSERT_TRUE(closed.prove("the job's secret"));
    closed.send_bytes(request.substr(0, 7));
    closed_port = closed.local_port();
  }
  EXPECT_NE(line_for(closed_port)
                .find("closed in the middle of a request with 3 of " +
                      std::to_string(request.size() - 4) + " bytes of a request"),
            std::string::npos)
      << line_for(closed_port);
  RawClient stalled(server->port()), served(server->port());
  ASSERT_TRUE(stalled.prove("the job's secret"));
  ASSERT_TRUE(served.prove("the job's secret"));
  stalled.send_bytes(request.substr(0, 2));
  EXPECT_EQ(served.call(Writer().u8(uint8_t(Op::kNumKeys))).size(), 9u);
  const double s = stalled.seconds_until_closed();
  EXPECT_GT(s, 0.2);
  EXPECT_LT(s, 3.0);  // 300 ms, with room for a loaded machine
  EXPECT_NE(line_for(stalled.local_port())
                .find("stalled for 300 ms in the middle of a request; closed with 2 bytes of a "
                      "request's length unread"),
            std::string::npos)
      << line_for(stalled.local_port());
  RawClient sending(server->port());
  ASSERT_TRUE(sending.prove("the job's secret"));
  sending.send_bytes(request.substr(0, 5));
  EXPECT_EQ(served.call(Writer().u8(uint8_t(Op::kNumKeys))).size(), 9u);  // the 5 bytes are in
  EXPECT_EQ(server->refused(), 0u);
  server.reset();
  EXPECT_NE(
      line_for(sending.local_port()).find("was still sending a request when the store stopped"),
      std::string::npos);
}

TEST(StoreServer, BindErrorsSayWhy) {
  try {
    StoreServer::bind("192.0.2.1", 0, {});  // TEST-NET-1: not this machine's
    ADD_FAILURE() << "bound an address that is not this machine's";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), accel::Errc::rendezvous);
    EXPECT_NE(std::string(e.what()).find("not an address of this machine"), std::string::npos)
        << e.what();
  }
  auto first = StoreServer::bind("127.0.0.1", 0, {});
  try {
    StoreServer::bind("127.0.0.1", first->port(), {});
    ADD_FAILURE() << "bound a port in use";
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is in use"), std::string::npos) << e.what();
  }
}

}  // namespace
