// Forming libaccel's TCP ring: a key only this job's ranks can derive, each rank's listening
// address through the store, and the authenticated mesh (net/mesh.hpp).
#include <ifaddrs.h>
#include <netdb.h>

#include "common/error.hpp"
#include "net/mesh.hpp"
#include "runtime/communicator.hpp"
#include "runtime/communicator_impl.hpp"
#include "security/random.hpp"
#include "security/sha256.hpp"

namespace accel::runtime {

namespace detail {

std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    fail(Errc::rendezvous, sys_error("GLOO_SOCKET_IFNAME: cannot list the interfaces", errno));
  std::string v4, v6;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || name != a->ifa_name) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[NI_MAXHOST] = "";
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    std::string& slot = family == AF_INET ? v4 : v6;
    if (slot.empty()) slot = text;
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty() && v6.find('%') == std::string::npos) return v6;
  fail(Errc::rendezvous, "GLOO_SOCKET_IFNAME names '" + name +
                             "', which is not an interface of this machine with an address");
}

}  // namespace detail

void Communicator::form_tcp_ring(const ProcessPlace& place, const CommOptions& options,
                                 std::chrono::steady_clock::time_point deadline) {
  transport_ = "tcp";
  // Rank 0 draws the session value; the store (token-guarded, or under the token-derived prefix
  // of a launcher's store) carries it to the ranks.
  std::string session;
  try {
    if (rank_ == 0) {
      uint8_t bytes[32];
      security::random_bytes(bytes, sizeof bytes);
      session = security::to_hex(bytes, sizeof bytes);
      impl_->job_store->set("net/session", std::vector<uint8_t>(session.begin(), session.end()));
    } else {
      const auto got = impl_->job_store->get("net/session");
      session.assign(got.begin(), got.end());
    }
  } catch (const accel::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(Errc::rendezvous,
         "rank " + std::to_string(rank_) +
             " could not share the collectives' session through the store: " + detail::what_of(e));
  }
  net::MeshSetup setup;
  setup.rank = rank_;
  setup.size = size_;
  setup.listen_address = collective_address(place);
  setup.key = net::mesh_key(place.job_token, session);
  setup.deadline = deadline;
  setup.name = "rank " + std::to_string(rank_) + "'s collectives listener";
  auto store = impl_->job_store;
  setup.publish = [store, this](const std::string& at) {
    store->set("net/at/" + std::to_string(rank_), std::vector<uint8_t>(at.begin(), at.end()));
  };
  setup.lookup = [store, this](int r) {
    try {
      const auto got = store->get("net/at/" + std::to_string(r));
      return std::string(got.begin(), got.end());
    } catch (const accel::Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(Errc::rendezvous, "rank " + std::to_string(rank_) + " did not learn where rank " +
                                 std::to_string(r) +
                                 " listens for collectives: " + detail::what_of(e));
    }
  };
  // The listener's lines come from its own thread: the process's logger, as the store's do.
  setup.refused = [](const std::string& line) {
    logging::process_logger().say(logging::kWarning, line);
  };
  if (setup.listen_address.empty())
    fail(Errc::rendezvous, "rank " + std::to_string(rank_) + " has no address towards " +
                               place.master_addr + " to listen on for collectives");
  impl_->ring =
      std::make_unique<net::Ring>(rank_, size_, net::form_mesh(setup), options.collective);
  impl_->sequencer = std::make_unique<net::Sequencer>();
}

}  // namespace accel::runtime
