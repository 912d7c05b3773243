// Work whose outcome every rank must share. run_on_main: only the main process does it while every
// process waits; every rank returns alike, with the main process's error class and message.
// run_on_all: every rank does its part, then they agree; if any rank failed, every rank fails (with
// its own error, or the lowest failing rank's), so that no rank goes on alone.
// run_on_local_main: run_on_all where only each machine's local main process does the work.
// save_on_each_node: whether saves write one copy per machine (Accelerate's ProjectConfiguration).
#pragma once

#include <exception>
#include <string>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "ops/collectives.hpp"
#include "runtime/accelerator.hpp"

namespace accel::ops {

namespace detail {

// A failure as it travels between ranks: "<code>:<message>", empty for success.
inline std::string pack_failure(Errc code, const std::string& error) {
  return error.empty() ? "" : std::to_string(static_cast<int>(code)) + ":" + error;
}

inline void unpack_failure(const std::string& packed, Errc* code, std::string* error) {
  const auto colon = packed.find(':');
  long long c = static_cast<long long>(Errc::internal);
  parse_int(packed.substr(0, colon), &c);
  *code = static_cast<Errc>(c);
  *error = packed.substr(colon + 1);
}

// Runs `body`, returning its failure (class and message) instead of throwing it.
template <class F>
std::string run_captured(F&& body, Errc* code) {
  try {
    body();
  } catch (const accel::Error& e) {
    *code = e.code();
    return e.what();
  } catch (const std::exception& e) {
    *code = Errc::internal;
    return e.what();
  }
  return "";
}

}  // namespace detail

template <class F>
void run_on_main(runtime::Accelerator& acc, F&& body) {
  std::string error;
  Errc code = Errc::io;
  if (acc.is_main_process()) {
    error = detail::run_captured(body, &code);
    if (auto* comm = acc.communicator()) gather_object(comm, detail::pack_failure(code, error));
  } else if (auto* comm = acc.communicator()) {
    const std::string got = gather_object(comm, "")[0];
    if (!got.empty()) detail::unpack_failure(got, &code, &error);
  }
  if (!error.empty()) fail(code, "on the main process: " + error);
}

template <class F>
void run_on_all(runtime::Accelerator& acc, F&& body) {
  Errc code = Errc::io;
  const std::string error = detail::run_captured(body, &code);
  if (auto* comm = acc.communicator()) {
    const auto all = gather_object(comm, detail::pack_failure(code, error));
    if (error.empty()) {
      for (size_t r = 0; r < all.size(); ++r) {
        if (all[r].empty()) continue;
        Errc theirs = Errc::internal;
        std::string message;
        detail::unpack_failure(all[r], &theirs, &message);
        fail(theirs, "on rank " + std::to_string(r) + ": " + message);
      }
    }
  }
  if (!error.empty()) fail(code, error);
}

template <class F>
void run_on_local_main(runtime::Accelerator& acc, F&& body) {
  run_on_all(acc, [&] {
    if (acc.is_local_main_process()) body();
  });
}

// Accelerate's save_on_each_node: true when the setting is on and the job spans several machines
// (some rank is not on this one), so that each machine's local main process writes its own copy.
// Collective then: every rank must have the same setting, or every rank fails with
// Errc::config naming the ranks that differ. False (and no collective) on one machine.
inline bool save_on_each_node(runtime::Accelerator& acc) {
  const auto& place = acc.place();
  auto* comm = acc.communicator();
  if (!comm || place.world_size <= place.local_world_size) return false;
  const bool mine = acc.settings().flag("save_on_each_node");
  const auto all = gather_object(comm, mine ? "1" : "0");
  std::string on, off;
  for (size_t r = 0; r < all.size(); ++r) (all[r] == "1" ? on : off) += " " + std::to_string(r);
  if (!on.empty() && !off.empty())
    fail(Errc::config, "save_on_each_node differs between ranks: true on rank(s)" + on +
                           ", false on rank(s)" + off + "; set it alike on every machine");
  return mine;
}

}  // namespace accel::ops
