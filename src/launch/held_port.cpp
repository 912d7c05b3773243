#include "launch/held_port.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace accel::launch {

HeldPort::HeldPort(const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int gai = getaddrinfo(address.c_str(), "0", &hints, &found);
  if (gai != 0)
    fail(Errc::rendezvous, "the store's listen address '" + address +
                               "' is not a numeric address: " + gai_strerror(gai));
  int err = 0;
  for (addrinfo* ai = found; ai && fd_ < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int on = 1, off = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    // "::" means every interface of both families, as "0.0.0.0" would not.
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      fd_ = fd;
      port_ = bound.ss_family == AF_INET6
                  ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                  : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      err = errno;
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (fd_ < 0)
    fail(Errc::rendezvous, "could not reserve a port on " + address +
                               " for the rendezvous store: " + std::strerror(err));
}

HeldPort::~HeldPort() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace accel::launch
