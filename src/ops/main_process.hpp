// Work whose outcome every rank must share. run_on_main: only the main process does it while every
// process waits; every rank returns alike, with the main process's error class and message.
// run_on_all: every rank does its part, then they agree; if any rank failed, every rank fails (with
// its own error, or the lowest failing rank's), so that no rank goes on alone.
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

}  // namespace accel::ops
