#include "store/endpoint.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

namespace accel::store {

bool is_loopback_address(const std::string& a) {
  return a.rfind("127.", 0) == 0 || a == "::1" || a.rfind("::ffff:127.", 0) == 0;
}

bool is_wildcard_address(const std::string& a) {
  return a == "0.0.0.0" || a == "::";
}

std::string resolve_numeric(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return "";
  // An IPv4 address first: the peers' side of most clusters.
  const addrinfo* pick = found;
  for (const addrinfo* ai = found; ai; ai = ai->ai_next)
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  char text[INET6_ADDRSTRLEN] = "";
  getnameinfo(pick->ai_addr, pick->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(found);
  return text;
}

std::string local_connect_address(const std::string& listen) {
  if (listen == "0.0.0.0") return "127.0.0.1";
  if (listen == "::") return "::1";
  return listen;
}

StoreEndpoint store_endpoint(const std::string& master_addr, bool all_local,
                             const std::string& listen_override) {
  StoreEndpoint e;
  if (!listen_override.empty()) {
    e.listen = listen_override;
    e.connect = all_local ? local_connect_address(listen_override) : master_addr;
    return e;
  }
  if (all_local) {  // no name lookup at start-up: loopback whatever MASTER_ADDR says
    e.listen = e.connect = master_addr == "::1" ? "::1" : "127.0.0.1";
    return e;
  }
  e.connect = master_addr;
  const std::string master = resolve_numeric(master_addr);
  in6_addr scratch;
  const bool named = master_addr != "localhost" &&
                     inet_pton(AF_INET, master_addr.c_str(), &scratch) != 1 &&
                     inet_pton(AF_INET6, master_addr.c_str(), &scratch) != 1;
  // A loopback address given as such: the ranks are meant to meet on this machine.
  if (master.empty() || !is_loopback_address(master) || !named) {
    e.listen = master.empty() ? master_addr : master;  // unresolvable: bind reports it
    return e;
  }
  // MASTER_ADDR names this machine by a loopback address here (Debian's /etc/hosts maps the host
  // name to 127.0.1.1) while the other machines resolve it to one they can reach.
  e.listen = "::";
  e.note = "MASTER_ADDR=" + master_addr + " resolves to " + master +
           " on this machine, a loopback address the other machines cannot reach: the store "
           "listens on every interface. Set ACCEL_LISTEN_ADDRESS to this machine's address "
           "towards its peers to listen there only";
  return e;
}

}  // namespace accel::store
