// A c10d::Store that talks to libaccel's store server (store/server.hpp), proving the job token
// before its first request. The census, the TCP transport's set-up, Gloo and NCCL use it as they
// would a TCPStore.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <mutex>
#include <string>

#include "compat/torch_version.hpp"

namespace accel::store {

class TokenStore : public c10d::Store {
 public:
  // Connects to host:port, retrying a refused connection every 10 ms until `deadline`, and proves
  // `token`. Throws accel::Error(rendezvous) when nothing listened by then, when what listens is
  // not a libaccel store, or when the token is not the server's.
  TokenStore(std::string host, int port, std::string token, std::chrono::milliseconds timeout,
             std::chrono::steady_clock::time_point deadline);
  ~TokenStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
#if ACCEL_TORCH2
  c10::intrusive_ptr<c10d::Store> clone() override;
#endif

  std::string endpoint() const {
    return host_ + ":" + std::to_string(port_);
  }

 private:
  void connect_and_prove(std::chrono::steady_clock::time_point deadline);
  // Sends one framed request and returns the reply's body after its status byte; `wait` is how
  // long the server may hold it (0: no limit). Throws on a timeout or a lost connection.
  std::string call(const std::string& request, std::chrono::milliseconds wait,
                   const std::string& what);

  std::string host_;
  int port_;
  std::string token_;
  std::mutex mu_;
  int fd_ = -1;
};

}  // namespace accel::store
