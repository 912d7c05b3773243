// The rendezvous: the store (libaccel's, or torchrun's agent's), the census (communicator_census),
// the Gloo group, the shared-memory segment (communicator_shm) and the device's group.
#include "runtime/communicator.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "compat/process_group.hpp"
#include "compat/tcp_store.hpp"
#include "cuda/plugin.hpp"
#include "runtime/communicator_impl.hpp"
#include "security/job_token.hpp"
#include "store/client.hpp"
#include "store/endpoint.hpp"
#include "store/server.hpp"

namespace accel::runtime {

using detail::contains;
using detail::local_address_towards;
using detail::seconds_text;
using detail::what_of;

namespace detail {

std::string seconds_text(std::chrono::milliseconds ms) {
  return format_real(static_cast<double>(ms.count()) / 1000.0);
}

std::string local_address_towards(const std::string& addr, int port) {
  if (addr == "localhost" || store::is_loopback_address(addr)) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return "";
  std::string out;
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  char text[INET6_ADDRSTRLEN] = "";
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
      getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof text, nullptr, 0,
                  NI_NUMERICHOST) == 0)
    out = text;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return out;
}

}  // namespace detail

namespace {

std::atomic<int> g_generation{0};

// Waits until something listens at addr:port, trying every 10 ms. c10d's client retries a refused
// connection only after about a second, and ranks usually start before rank 0 has opened its
// store (its LibTorch start-up is no faster than theirs). False when nothing listened by the
// deadline: the rendezvous has one deadline, so the store's own connect never waits again.
bool wait_for_listener(const std::string& addr, int port,
                       std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    fail(Errc::rendezvous, "the rendezvous address '" + addr + "' does not resolve");
  for (;;) {
    for (addrinfo* ai = found; ai; ai = ai->ai_next) {
      const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      const bool up = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
      close(fd);
      if (up) {
        freeaddrinfo(found);
        return true;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  freeaddrinfo(found);
  return false;
}

std::string nothing_listened(const ProcessPlace& place, const CommOptions& options,
                             const std::string& endpoint, const std::string& who_hosts) {
  return "rank " + std::to_string(place.rank) + " could not reach the rendezvous store at " +
         endpoint + ", hosted by " + who_hosts + ": nothing listened there for " +
         seconds_text(options.rendezvous) + " s (rendezvous_timeout). Check that " + who_hosts +
         " started, and MASTER_ADDR and MASTER_PORT";
}

}  // namespace

Communicator::Communicator(const ProcessPlace& place, const CommOptions& comm_options)
    : impl_(std::make_unique<Impl>()),
      rank_(place.rank),
      size_(place.world_size),
      collective_timeout_(comm_options.collective) {
  const bool host_store = !place.store_hosted && place.rank == 0;
  const std::string endpoint = place.master_addr + ":" + std::to_string(place.master_port);
  const std::string who_hosts =
      place.store_hosted ? "the launcher (" + place.engine + ")" : "rank 0";

  // One deadline for the whole rendezvous: reaching the store and the census share it.
  const auto deadline = std::chrono::steady_clock::now() + comm_options.rendezvous;
  if (place.store_hosted)
    join_launcher_store(place, comm_options, deadline, endpoint, who_hosts);
  else
    open_token_store(place, comm_options, deadline, host_store, endpoint);
  // Every rendezvous key lives under the job's id, so a stray process of another job that reaches
  // this store by mistake finds nothing of ours, and under a per-process generation, so that a
  // second accelerator in the same job does not see the first one's census. A launcher's store
  // outlives a failed attempt: the attempt number keeps a restarted one from its keys.
  // With a job token, the keys also live under a name derived from it: a store libaccel does not
  // guard (torchrun's agent store) hides them from a process without the token.
  const std::string secret =
      security::token_key_prefix(security::JobToken{place.job_token, place.job_token_source});
  const std::string prefix = "accel/" + (secret.empty() ? "" : secret + "/") + place.run_id + "/a" +
                             std::to_string(place.attempt) + "/g" +
                             std::to_string(g_generation.fetch_add(1));
  impl_->job_store = c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store);

  census(place, comm_options, deadline, host_store, endpoint);
  if (comm_options.gloo)
    form_gloo_group(place, comm_options);
  else
    form_tcp_ring(place, comm_options, deadline);
  exchange_identities(place);
  find_local_ranks(place);
  if (comm_options.shared_memory && local_world_size_ == size_) setup_shared_memory();
}

// Where this rank's collectives listen: GLOO_SOCKET_IFNAME's interface when set (as PyTorch
// reads it); the loopback address when every rank is on this machine; otherwise the address this
// host uses towards the store, which the peers can reach (the host name may resolve to one they
// cannot, on a machine with several interfaces or in a network namespace).
std::string Communicator::collective_address(const ProcessPlace& place) const {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return detail::interface_address(ifname);
  if (place.all_local())
    return impl_->store_at.connect.empty() ? "127.0.0.1" : impl_->store_at.connect;
  return local_address_towards(place.master_addr, place.master_port);
}

void Communicator::form_gloo_group(const ProcessPlace& place, const CommOptions& options) {
  transport_ = "gloo";
  try {
    compat::GlooEndpoint gloo_at;
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
      gloo_at.interface = ifname;
    else
      gloo_at.address = collective_address(place);
    auto pg_store = c10::make_intrusive<c10d::PrefixStore>("gloo", impl_->job_store);
    impl_->group = compat::make_gloo_group(pg_store, rank_, size_, options.collective, gloo_at,
                                           /*threads=*/2);
  } catch (const std::exception& e) {
    fail(Errc::rendezvous, "could not form the Gloo process group: " + what_of(e));
  }
}

// torchrun's agent (TORCHELASTIC_USE_AGENT_STORE) hosts a c10d TCPStore: every rank is its
// client, as a PyTorch worker would be. It has no job token; the token-derived key prefix hides
// this job's keys from a process that lacks the token.
void Communicator::join_launcher_store(const ProcessPlace& place, const CommOptions& options,
                                       std::chrono::steady_clock::time_point deadline,
                                       const std::string& endpoint, const std::string& who_hosts) {
  if (!wait_for_listener(place.master_addr, place.master_port, deadline))
    fail(Errc::rendezvous, nothing_listened(place, options, endpoint, who_hosts));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(place.master_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = options.rendezvous;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(place.master_addr, opts);
  } catch (const std::exception& e) {
    const std::string msg = what_of(e);
    fail(Errc::rendezvous, "rank " + std::to_string(place.rank) +
                               " could not reach the rendezvous store at " + endpoint +
                               ", hosted by " + who_hosts + ", within " +
                               seconds_text(options.rendezvous) + " s: " + msg +
                               compat::store_mismatch_hint(msg, true));
  }
}

// libaccel's own store: rank 0 serves it (on the socket accel launch bound, or on the address
// store_endpoint picks), and every rank, rank 0 too, proves the job token to it.
void Communicator::open_token_store(const ProcessPlace& place, const CommOptions& options,
                                    std::chrono::steady_clock::time_point deadline, bool host_store,
                                    const std::string& endpoint) {
  impl_->token_source = place.job_token_source;
  impl_->store_at =
      store::store_endpoint(place.master_addr, place.all_local(), place.listen_address);
  std::string connect = impl_->store_at.connect;
  if (host_store) {
    logging::Logger& logger = options.logger ? *options.logger : logging::process_logger();
    // The store's lines come from its own thread: they go to the process's logger (standard
    // error), never into the program's sink, which runs on the program's threads only (accel.h).
    store::ServerOptions server_options;
    server_options.token = place.job_token;
    server_options.name = "rank 0's rendezvous store";
    try {
      impl_->server = place.store_fd >= 0
                          ? store::StoreServer::on_socket(place.store_fd, std::move(server_options))
                          : store::StoreServer::bind(impl_->store_at.listen, place.master_port,
                                                     std::move(server_options));
    } catch (const std::exception& e) {
      const std::string msg = what_of(e);
      const std::string hint =
          contains(msg, "in use")
              ? " (choose another MASTER_PORT, or let accel launch pick a free one)"
          : contains(msg, "not an address of this machine")
              ? " (MASTER_ADDR names machine 0 as its peers reach it; behind NAT or a service "
                "address, set ACCEL_LISTEN_ADDRESS to this machine's own address, or to 0.0.0.0 "
                "for every interface)"
              : "";
      fail(Errc::rendezvous, "rank 0 could not open the rendezvous store on port " +
                                 std::to_string(place.master_port) + ": " + msg + hint);
    }
    impl_->store_at.listen = impl_->server->address();
    connect = store::local_connect_address(impl_->store_at.listen);
    if (!impl_->store_at.note.empty())
      logger.say(logging::kWarning, "rank 0: " + impl_->store_at.note);
    if (place.job_token.empty() && !store::is_loopback_address(impl_->store_at.listen))
      logger.say(logging::kWarning,
                 "rank 0: no ACCEL_JOB_TOKEN: the rendezvous store on " + impl_->store_at.listen +
                     ":" + std::to_string(impl_->server->port()) +
                     " accepts any libaccel rank that reaches it; give every rank the same "
                     "ACCEL_JOB_TOKEN to refuse the rest");
  }
  try {
    impl_->store = c10::make_intrusive<store::TokenStore>(
        connect, place.master_port, place.job_token, options.rendezvous, deadline);
  } catch (const std::exception& e) {
    const std::string msg = what_of(e);
    if (contains(msg, "nothing listened"))
      fail(Errc::rendezvous, nothing_listened(place, options, endpoint, "rank 0"));
    fail(Errc::rendezvous, "rank " + std::to_string(place.rank) +
                               " could not join the rendezvous store at " + endpoint +
                               ", hosted by rank 0: " + msg);
  }
}

std::string Communicator::store_summary() const {
  const auto& at = impl_->store_at;
  if (impl_->server)
    return "listening on " + at.listen + ":" + std::to_string(impl_->server->port()) +
           (impl_->token_source.empty() ? ", no job token"
                                        : ", job token from " + impl_->token_source);
  if (at.connect.empty()) return "hosted by the launcher";
  return "reached at " + at.connect +
         (impl_->token_source.empty() ? ", no job token"
                                      : ", job token from " + impl_->token_source);
}

// A collective still running on the sequencer's thread ends at once (the peers see this rank's
// connections close), and the thread with it, before the connections go.
Communicator::~Communicator() {
  if (impl_->ring) impl_->ring->close();
  impl_->sequencer.reset();
}

void Communicator::attach_device(int index) {
  std::string why;
  const cuda::Plugin* plugin = cuda::load_plugin(&why);
  if (!plugin) fail(Errc::unsupported, "a CUDA device was chosen but " + why);
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>("nccl", impl_->job_store);
    impl_->device_group = plugin->make_nccl_group(store, rank_, size_, collective_timeout_, index);
    impl_->device_index = index;
  } catch (const accel::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(Errc::rendezvous, "could not form the NCCL process group on cuda:" +
                               std::to_string(index) + ": " + what_of(e));
  }
}

}  // namespace accel::runtime
