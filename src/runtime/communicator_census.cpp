// The census of the ranks at start-up, and what they learn of each other: who is on which machine
// (host name, boot id), pids and start times for naming a failed peer (communicator_peers).
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "runtime/communicator.hpp"
#include "runtime/communicator_impl.hpp"

namespace accel::runtime {

using detail::local_address_towards;
using detail::process_status;
using detail::seconds_text;
using detail::what_of;

namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

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

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
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

}  // namespace accel::runtime
