#include "launch/held_port.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace accel::launch {

HeldPort::HeldPort() {
  // IPv6 with dual stack when the host has it (as c10d's server socket), else IPv4.
  fd_ = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool v6 = fd_ >= 0;
  if (!v6) fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail(Errc::rendezvous, std::string("socket: ") + std::strerror(errno));
  const int on = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  int rc;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    rc = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (rc != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    const int err = errno;
    close(fd_);
    fail(Errc::rendezvous,
         std::string("could not reserve a port for the rendezvous store: ") + std::strerror(err));
  }
  port_ = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

HeldPort::~HeldPort() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace accel::launch
