// libaccel's rendezvous store server: a key-value store on one thread that serves only clients
// proving the job token (store/wire.hpp). Every other connection (nothing sent within the
// handshake deadline, bytes that are not the handshake, a wrong proof, an oversized request) is
// closed and named in the log; the store and its clients go on. A client that proved the token and
// then left a request unfinished (it closed, stalled past request_timeout, or was still sending
// when the store stopped) is named too. Pure POSIX: no LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace accel::store {

struct ServerOptions {
  std::string token;  // empty: no token was given, the handshake proves only the protocol
  std::chrono::milliseconds handshake_timeout{800};
  // A request whose first bytes came must be whole within this; a client stalled mid-request is
  // then closed and named (it never delays the others: the store serves them meanwhile).
  std::chrono::milliseconds request_timeout{10000};
  std::string name = "the rendezvous store";  // for log lines
  // One line per refusal or failure; default: the process's logger (logging/logger.hpp).
  std::function<void(const std::string&)> log;
};

class StoreServer {
 public:
  // Serves on `fd`, a bound TCP socket (accel launch's held port); takes it over.
  static std::unique_ptr<StoreServer> on_socket(int fd, ServerOptions options);
  // Binds address:port (port 0: a free one) and serves there. Throws accel::Error(rendezvous)
  // when the port is in use or the address is not one of this machine's.
  static std::unique_ptr<StoreServer> bind(const std::string& address, int port,
                                           ServerOptions options);
  ~StoreServer();  // stops serving and closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  const std::string& address() const;  // the numeric address it listens on
  uint64_t refused() const;            // connections refused so far

  struct Impl;

 private:
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The numeric address and port of a socket's local end ("127.0.0.1", "::1").
std::string socket_address(int fd, int* port);

}  // namespace accel::store
