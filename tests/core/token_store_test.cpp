// The c10d::Store client of libaccel's store (what Gloo, NCCL and the census call) against the
// server: the operations through a PrefixStore, timeouts said as such, a server that is gone, a
// wrong token and a listener that is not libaccel's each refused with a message that says so.
#include "store/client.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <arpa/inet.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "store/server.hpp"

using accel::store::StoreServer;
using accel::store::TokenStore;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::unique_ptr<StoreServer> serve(const std::string& token) {
  accel::store::ServerOptions o;
  o.token = token;
  o.log = [](const std::string&) {};
  return StoreServer::bind("127.0.0.1", 0, std::move(o));
}

c10::intrusive_ptr<TokenStore> client(int port, const std::string& token,
                                      std::chrono::milliseconds timeout = 2s) {
  return c10::make_intrusive<TokenStore>("127.0.0.1", port, token, timeout, Clock::now() + 5s);
}

std::string message_of(const std::function<void()>& f, accel::Errc* code = nullptr) {
  try {
    f();
  } catch (const accel::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

TEST(TokenStore, OperationsThroughAPrefixStore) {
  auto server = serve("tok");
  auto raw = client(server->port(), "tok");
  auto store = c10::make_intrusive<c10d::PrefixStore>("job", raw);
  store->set("a", std::vector<uint8_t>{1, 2, 3});
  EXPECT_EQ(store->get("a"), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(store->add("n", 2), 2);
  EXPECT_EQ(store->add("n", 3), 5);
  EXPECT_TRUE(store->check({"a", "n"}));
  EXPECT_FALSE(store->check({"a", "missing"}));
  EXPECT_EQ(store->getNumKeys(), 2);
  EXPECT_TRUE(store->deleteKey("a"));
  EXPECT_FALSE(store->check({"a"}));
  // A get waits for another client's set.
  auto other = c10::make_intrusive<c10d::PrefixStore>("job", client(server->port(), "tok"));
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    other->set("late", std::vector<uint8_t>{9});
  });
  EXPECT_EQ(store->get("late"), (std::vector<uint8_t>{9}));
  later.join();
  store->wait({"late", "n"});
}

TEST(TokenStore, ATimeoutIsSaidAsOne) {
  auto server = serve("tok");
  auto store = client(server->port(), "tok", 300ms);
  accel::Errc code{};
  const auto t0 = Clock::now();
  const std::string msg = message_of([&] { store->get("never"); }, &code);
  EXPECT_EQ(code, accel::Errc::timeout) << msg;
  EXPECT_NE(msg.find("Timed out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'never'"), std::string::npos) << msg;
  EXPECT_GE(Clock::now() - t0, 290ms);
  store->set("still", std::vector<uint8_t>{});  // the connection goes on
  EXPECT_NE(message_of([&] {
              store->wait({"x", "y"}, 100ms);
            }).find("Timed out"),
            std::string::npos);
}

TEST(TokenStore, AServerThatIsGoneIsAPeerFailure) {
  auto server = serve("tok");
  auto store = client(server->port(), "tok");
  server.reset();
  accel::Errc code{};
  const std::string msg = message_of([&] { store->get("k"); }, &code);
  EXPECT_EQ(code, accel::Errc::peer_failed) << msg;
  EXPECT_NE(msg.find("closed the connection"), std::string::npos) << msg;
}

TEST(TokenStore, AWrongTokenIsRefusedAndNamed) {
  auto server = serve("tok");
  accel::Errc code{};
  const std::string msg = message_of([&] { client(server->port(), "other"); }, &code);
  EXPECT_EQ(code, accel::Errc::rendezvous) << msg;
  EXPECT_NE(msg.find("ACCEL_JOB_TOKEN"), std::string::npos) << msg;
  EXPECT_EQ(server->refused(), 3u);  // three tries, each refused
}

TEST(TokenStore, AListenerThatIsNotLibaccelsIsNamed) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  // It accepts (the kernel does) and says nothing, as a TCPStore server would.
  const std::string msg = message_of(
      [&] { c10::make_intrusive<TokenStore>("127.0.0.1", port, "tok", 2s, Clock::now() + 1s); });
  EXPECT_NE(msg.find("not libaccel's rendezvous store"), std::string::npos) << msg;
  close(fd);
}

TEST(TokenStore, NothingListeningBeforeTheDeadline) {
  auto server = serve("tok");
  const int port = server->port();
  server.reset();
  const auto t0 = Clock::now();
  const std::string msg = message_of(
      [&] { c10::make_intrusive<TokenStore>("127.0.0.1", port, "tok", 2s, Clock::now() + 300ms); });
  EXPECT_NE(msg.find("nothing listened"), std::string::npos) << msg;
  EXPECT_LT(Clock::now() - t0, 2s);
}

}  // namespace
