// What can be known of the ranks that made a collective fail: exited, stopped or alive (a peer on
// this machine, through /proc), or the host whose connection broke.
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/parse.hpp"
#include "runtime/communicator.hpp"
#include "runtime/communicator_impl.hpp"

namespace accel::runtime {

using detail::contains;

namespace detail {

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

}  // namespace detail

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
    if (!detail::process_status(p.pid, &state, &start) || start != p.start_time || state == 'Z' ||
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

}  // namespace accel::runtime
