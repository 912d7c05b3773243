// The launcher's rendezvous store: a c10d TCPStore server that lives as long as the launch. Opening
// it on port 0 lets the OS pick a free port, so two jobs on one machine never meet.
#pragma once

#include <memory>
#include <string>

namespace accel::launch {

class StoreHost {
 public:
  // Binds `port` (0 = any free port) on all interfaces. Throws accel::Error(rendezvous) when the
  // port is in use or cannot be bound.
  explicit StoreHost(int port);
  ~StoreHost();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace accel::launch
