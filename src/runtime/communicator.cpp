#include "runtime/communicator.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "compat/dist_errors.hpp"
#include "compat/process_group.hpp"
#include "compat/tcp_store.hpp"
#include "cuda/plugin.hpp"
#include "runtime/communicator_impl.hpp"
#include "runtime/shm_reduce.hpp"
#include "security/job_token.hpp"
#include "store/client.hpp"
#include "store/endpoint.hpp"
#include "store/server.hpp"

namespace accel::runtime {

using detail::classify;
using detail::contains;
using detail::what_of;

namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || store::is_loopback_address(addr);
}

std::atomic<int> g_generation{0};

// "; machine 1 (ranks 2-3) never joined" when every rank of a machine is missing: a launcher
// that gave LOCAL_WORLD_SIZE places ranks machine by machine.
std::string absent_machines(const ProcessPlace& place, const std::vector<int>& missing) {
  const int per = place.local_world_size;
  if (!place.local_known || per >= place.world_size || place.world_size % per != 0) return "";
  std::string out;
  for (size_t i = 0; i < missing.size();) {
    const int machine = missing[i] / per;
    size_t j = i;
    while (j < missing.size() && missing[j] / per == machine) ++j;
    if (static_cast<int>(j - i) == per)
      out += std::string(out.empty() ? "" : ", ") + "machine " + std::to_string(machine) +
             " (ranks " + std::to_string(machine * per) + "-" +
             std::to_string(machine * per + per - 1) + ")";
    i = j;
  }
  return out.empty()
             ? ""
             : "; no rank of " + out +
                   " joined: that machine's launcher never started or cannot reach the store";
}

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

// "0.5", never "0,5": an ostream would use the host program's global C++ locale.
std::string seconds_text(std::chrono::milliseconds ms) {
  return format_real(static_cast<double>(ms.count()) / 1000.0);
}

std::string nothing_listened(const ProcessPlace& place, const CommOptions& options,
                             const std::string& endpoint, const std::string& who_hosts) {
  return "rank " + std::to_string(place.rank) + " could not reach the rendezvous store at " +
         endpoint + ", hosted by " + who_hosts + ": nothing listened there for " +
         seconds_text(options.rendezvous) + " s (rendezvous_timeout). Check that " + who_hosts +
         " started, and MASTER_ADDR and MASTER_PORT";
}

// The state letter and start time of a process from /proc/<pid>/stat; false when it is gone.
bool process_status(long long pid, char* state, uint64_t* start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return false;
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream fields(text.substr(paren + 1));
  std::string f;
  std::vector<std::string> v;
  while (fields >> f) v.push_back(f);
  if (v.size() < 20 || v[0].empty()) return false;
  *state = v[0][0];
  return parse_uint(v[19], start_time);
}

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The local address of a route to addr:port (a UDP "connect" sends nothing).
std::string local_address_towards(const std::string& addr, int port) {
  if (is_loopback(addr)) return "127.0.0.1";
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

PeerInfo self_info(const ProcessPlace& place) {
  PeerInfo me;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  me.host = host;
  me.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  me.address = local_address_towards(place.master_addr, place.master_port);
  me.pid = getpid();
  char state = 0;
  process_status(me.pid, &state, &me.start_time);
  return me;
}

constexpr size_t kInfoBytes = 512;

std::string pack(const PeerInfo& p) {
  std::string out = p.host + "\n" + p.boot_id + "\n" + p.address + "\n" + std::to_string(p.pid) +
                    "\n" + std::to_string(p.start_time);
  out.resize(kInfoBytes, '\0');
  return out;
}

PeerInfo unpack(const char* bytes) {
  std::istringstream in(std::string(bytes, strnlen(bytes, kInfoBytes)));
  PeerInfo p;
  std::string pid, start;
  std::getline(in, p.host);
  std::getline(in, p.boot_id);
  std::getline(in, p.address);
  std::getline(in, pid);
  std::getline(in, start);
  parse_int(pid, &p.pid);
  parse_uint(start, &p.start_time);
  return p;
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

  try {
    // Gloo's own default resolves the host name, which on a machine with several interfaces
    // (or in a network namespace) may name an address the peers cannot reach; the address this
    // host uses towards the store is one they can.
    compat::GlooEndpoint gloo_at;
    // When every rank is on this machine, Gloo listens on the loopback address only.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
      gloo_at.interface = ifname;
    else if (place.all_local())
      gloo_at.address = impl_->store_at.connect.empty() ? "127.0.0.1" : impl_->store_at.connect;
    else
      gloo_at.address = local_address_towards(place.master_addr, place.master_port);
    auto pg_store = c10::make_intrusive<c10d::PrefixStore>("gloo", impl_->job_store);
    impl_->group = compat::make_gloo_group(pg_store, rank_, size_, comm_options.collective, gloo_at,
                                           /*threads=*/2);
  } catch (const std::exception& e) {
    fail(Errc::rendezvous, "could not form the Gloo process group: " + what_of(e));
  }
  exchange_identities(place);
  find_local_ranks(place);
  if (comm_options.shared_memory && local_world_size_ == size_) setup_shared_memory();
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
      std::fprintf(stderr, "libaccel: rank 0: %s\n", impl_->store_at.note.c_str());
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

// Rank 0 creates the segment and publishes its name; every rank attaches, then all agree (a Gloo
// all-reduce) so that either every rank uses shared memory or none does. Failing to set it up is
// not an error: the job goes on over Gloo, and all_reduce_transport() says why.
void Communicator::setup_shared_memory() {
  const std::string key = "shm/segment";
  const size_t slot_bytes = ShmReduce::default_slot_bytes(size_);
  std::string name, reason;
  std::unique_ptr<ShmReduce> shm;
  try {
    uint64_t token = 0;
    if (rank_ == 0) {
      std::random_device rd;
      token = (static_cast<uint64_t>(rd()) << 32) ^ rd();
      name = "/accel-" + std::to_string(getpid()) + "-" + std::to_string(token);
      try {
        shm = std::make_unique<ShmReduce>(ShmReduce::create(name, size_, slot_bytes, token));
      } catch (...) {
        impl_->job_store->set(key, std::vector<uint8_t>{});  // the others must not wait for it
        name.clear();
        throw;
      }
      const std::string value = name + " " + std::to_string(token);
      impl_->job_store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    } else {
      const auto bytes = impl_->job_store->get(key);
      const std::string value(bytes.begin(), bytes.end());
      const auto space = value.find(' ');
      if (space == std::string::npos) fail(Errc::io, "rank 0 could not create the segment");
      if (!parse_uint(value.substr(space + 1), &token))
        fail(Errc::io, "rank 0 published a malformed segment token '" + value + "'");
      name = value.substr(0, space);
      shm = std::make_unique<ShmReduce>(ShmReduce::attach(name, rank_, size_, slot_bytes, token));
    }
    shm->publish_pid();
  } catch (const std::exception& e) {
    reason = what_of(e);
    shm.reset();
  }
  at::Tensor agreed = at::full({1}, shm ? 1 : 0, at::kInt);
  all_reduce(agreed, ReduceOp::kMin);  // over Gloo: no segment is in use yet
  // Every rank has attached (or given up): the name can go, the mappings stay.
  if (rank_ == 0 && !name.empty()) ShmReduce::unlink(name);
  if (agreed.item<int>() == 1) {
    shm->watch_peers();
    impl_->shm = std::move(shm);
    impl_->shm_name = name;
    transport_ = "shared memory";
  } else {
    transport_ = "gloo (shared memory unavailable: " +
                 (reason.empty() ? std::string("another rank could not attach") : reason) + ")";
  }
}

// Each rank announces itself, then waits until every rank has, or names who is missing. When rank 0
// hosts the store, its verdict is final: it publishes the verdict and waits for the arrived ranks
// to read it before its exit takes the store away (they would otherwise see only a broken pipe).
void Communicator::census(const ProcessPlace& place, const CommOptions& timeouts,
                          std::chrono::steady_clock::time_point deadline, bool host_store,
                          const std::string& endpoint) {
  const bool rank0_hosts = !place.store_hosted;
  const std::string verdict_key = "census/verdict";
  auto& store = impl_->job_store;
  try {
    store->set("census/" + std::to_string(place.rank), std::vector<uint8_t>{1});
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back("census/" + std::to_string(r));
    // A client of rank 0's store gives rank 0 a moment to decide first.
    if (rank0_hosts && !host_store) deadline += std::chrono::milliseconds(500);
    while (!store->check(keys)) {
      if (rank0_hosts && !host_store && store->check({verdict_key})) {
        const auto bytes = store->get(verdict_key);
        store->add("census/acks", 1);
        fail(Errc::rendezvous, std::string(bytes.begin(), bytes.end()));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::vector<int> missing;
        for (int r = 0; r < size_; ++r)
          if (!store->check({keys[r]})) missing.push_back(r);
        const std::string verdict =
            "rendezvous failed: " + std::to_string(missing.size()) + " of " +
            std::to_string(size_) + " ranks did not arrive within " +
            seconds_text(timeouts.rendezvous) + " s (rendezvous_timeout); missing rank" +
            (missing.size() > 1 ? "s " : " ") + join_ranks(missing) +
            absent_machines(place, missing) + ". Check that every rank was started with " +
            "WORLD_SIZE=" + std::to_string(size_) + " and the same MASTER_ADDR:MASTER_PORT (" +
            endpoint + ", from " + place.endpoint_source + ")";
        if (host_store) {
          store->set(verdict_key, std::vector<uint8_t>(verdict.begin(), verdict.end()));
          const int64_t waiting = size_ - static_cast<int64_t>(missing.size()) - 1;
          const auto linger = std::chrono::steady_clock::now() + std::chrono::seconds(3);
          while (store->add("census/acks", 0) < waiting &&
                 std::chrono::steady_clock::now() < linger)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        fail(Errc::rendezvous, verdict);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const accel::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(Errc::rendezvous, "rank " + std::to_string(place.rank) + " lost the rendezvous store at " +
                               endpoint + " during the census (" + what_of(e) + ")" +
                               (rank0_hosts ? "; rank 0, which hosts it, may have exited" : ""));
  }
}

// One all-gather of a fixed-size record per rank: host, boot id, address, pid, start time.
void Communicator::exchange_identities(const ProcessPlace& place) {
  const std::string mine = pack(self_info(place));
  at::Tensor local = at::empty({static_cast<int64_t>(kInfoBytes)}, at::kByte);
  std::memcpy(local.data_ptr(), mine.data(), kInfoBytes);
  const auto all = all_gather(local);
  for (const auto& t : all) impl_->peers.push_back(unpack(static_cast<const char*>(t.data_ptr())));
}

// The engine's LOCAL_RANK/LOCAL_WORLD_SIZE when it gave them; else the ranks that share this
// machine's host name and boot id, in rank order.
void Communicator::find_local_ranks(const ProcessPlace& place) {
  local_rank_ = place.local_rank;
  local_world_size_ = place.local_world_size;
  const auto& peers = impl_->peers;
  if (place.local_known || peers.size() != static_cast<size_t>(size_)) return;
  const PeerInfo& me = peers[rank_];
  local_rank_ = 0;
  local_world_size_ = 0;
  for (int r = 0; r < size_; ++r) {
    if (peers[r].host != me.host || peers[r].boot_id != me.boot_id) continue;
    if (r < rank_) ++local_rank_;
    ++local_world_size_;
  }
}

std::string Communicator::host_name() const {
  if (rank_ < static_cast<int>(impl_->peers.size())) return impl_->peers[rank_].host;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return host;
}

// What can be known here of the ranks that made a collective fail: a peer on this machine is
// checked through /proc (exited, stopped, or alive); a peer elsewhere is narrowed down by the
// address in Gloo's message. Empty when nothing is known.
std::string Communicator::diagnose_peers(const std::string& message, bool peer_failed) const {
  // A peer's sockets close while it is still exiting: give its exit a moment to show in /proc.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  for (;;) {
    std::string found = diagnose_peers_once(message);
    if (!peer_failed || found.find(" exited") != std::string::npos ||
        std::chrono::steady_clock::now() >= until)
      return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Communicator::diagnose_peers_once(const std::string& message) const {
  const auto& peers = impl_->peers;
  if (peers.size() != static_cast<size_t>(size_)) return "";
  const PeerInfo& me = peers[rank_];
  std::vector<std::string> exited, stopped, alive, remote;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const PeerInfo& p = peers[r];
    const std::string who =
        "rank " + std::to_string(r) + " (pid " + std::to_string(p.pid) + " on host " + p.host + ")";
    if (p.boot_id.empty() || p.boot_id != me.boot_id) {
      if (!p.address.empty() && contains(message, ("[" + p.address + "]").c_str()))
        remote.push_back(who + ", at " + p.address);
      continue;
    }
    char state = 0;
    uint64_t start = 0;
    if (!process_status(p.pid, &state, &start) || start != p.start_time || state == 'Z' ||
        state == 'X')
      exited.push_back(who);
    else if (state == 'T' || state == 't')
      stopped.push_back(who);
    else
      alive.push_back(who);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  if (!exited.empty() || !stopped.empty()) {
    std::string out;
    if (!exited.empty()) out += list(exited) + (exited.size() > 1 ? " have" : " has") + " exited";
    if (!stopped.empty())
      out += std::string(out.empty() ? "" : "; ") + list(stopped) +
             (stopped.size() > 1 ? " are" : " is") + " stopped (SIGSTOP or a debugger)";
    return out;
  }
  if (!remote.empty())
    return "the connection to " + list(remote) + " broke: that rank or its host failed";
  if (!alive.empty() && size_ == 2) return list(alive) + " is alive but did not take part";
  return "";
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

Communicator::~Communicator() = default;

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
