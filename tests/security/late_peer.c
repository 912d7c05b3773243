/* LD_PRELOAD shim for the stranger tests: a rank whose TCP connects to any port but the
 * rendezvous store's (MASTER_PORT) start LATE_PEER_SECONDS late (default 3), as a slow peer's
 * would. While it is late, the ranks it connects to keep their collectives listener open: the
 * window in which strangers are sent at it. Nothing else changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

typedef int (*connect_fn)(int, const struct sockaddr*, socklen_t);

static int port_of(const struct sockaddr* sa) {
  if (sa->sa_family == AF_INET) return ntohs(((const struct sockaddr_in*)sa)->sin_port);
  if (sa->sa_family == AF_INET6) return ntohs(((const struct sockaddr_in6*)sa)->sin6_port);
  return -1;
}

/* Exported in spite of the project's hidden visibility: the interposition is the point. */
__attribute__((visibility("default"))) int connect(int fd, const struct sockaddr* sa,
                                                   socklen_t len) {
  static connect_fn real;
  int type = 0;
  socklen_t type_len = sizeof type;
  const char* store = getenv("MASTER_PORT");
  const char* late = getenv("LATE_PEER_SECONDS");
  if (!real) real = (connect_fn)dlsym(RTLD_NEXT, "connect");
  if (store && port_of(sa) > 0 && port_of(sa) != atoi(store) &&
      getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) == 0 && type == SOCK_STREAM) {
    struct timespec ts = {late ? atoi(late) : 3, 0};
    nanosleep(&ts, NULL);
  }
  return real(fd, sa, len);
}
