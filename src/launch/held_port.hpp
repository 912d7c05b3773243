// A free TCP port for the job's rendezvous store, found and held by the launcher without loading
// LibTorch (which costs ~0.5 s of start-up). The launcher binds port 0 with SO_REUSEADDR and does
// not listen; rank 0 inherits the socket and serves libaccel's store on it (no moment in which the
// port is free). A PyTorch program's TCPStore (which also sets SO_REUSEADDR) can still bind and
// listen on the port, while a plain bind elsewhere is refused for as long as the launcher holds it.
#pragma once

#include <string>

namespace accel::launch {

class HeldPort {
 public:
  // Binds a free port on `address` (numeric; "127.0.0.1" for a job on this machine). Throws
  // accel::Error(rendezvous) when no socket can be bound there.
  explicit HeldPort(const std::string& address);
  ~HeldPort();
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }
  // The bound socket (close-on-exec), for a rank's store to take over (LibTorch 2.x).
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace accel::launch
