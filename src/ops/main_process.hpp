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

template <class F>
void run_on_main(runtime::Accelerator& acc, F&& body) {
  std::string error;
  Errc code = Errc::io;
  if (acc.is_main_process()) {
    try {
      body();
    } catch (const accel::Error& e) {
      code = e.code();
      error = e.what();
    } catch (const std::exception& e) {
      code = Errc::internal;
      error = e.what();
    }
    if (auto* comm = acc.communicator()) {
      const std::string packed =
          error.empty() ? "" : std::to_string(static_cast<int>(code)) + ":" + error;
      gather_object(comm, packed);
    }
  } else if (auto* comm = acc.communicator()) {
    const std::string got = gather_object(comm, "")[0];
    if (!got.empty()) {
      const auto colon = got.find(':');
      long long c = static_cast<long long>(Errc::internal);
      parse_int(got.substr(0, colon), &c);
      code = static_cast<Errc>(c);
      error = got.substr(colon + 1);
    }
  }
  if (!error.empty()) fail(code, "on the main process: " + error);
}

template <class F>
void run_on_all(runtime::Accelerator& acc, F&& body) {
  std::string error;
  Errc code = Errc::io;
  try {
    body();
  } catch (const accel::Error& e) {
    code = e.code();
    error = e.what();
  } catch (const std::exception& e) {
    code = Errc::internal;
    error = e.what();
  }
  if (auto* comm = acc.communicator()) {
    const std::string packed =
        error.empty() ? "" : std::to_string(static_cast<int>(code)) + ":" + error;
    const auto all = gather_object(comm, packed);
    if (error.empty()) {
      for (size_t r = 0; r < all.size(); ++r) {
        if (all[r].empty()) continue;
        const auto colon = all[r].find(':');
        long long c = static_cast<long long>(Errc::internal);
        parse_int(all[r].substr(0, colon), &c);
        fail(static_cast<Errc>(c),
             "on rank " + std::to_string(r) + ": " + all[r].substr(colon + 1));
      }
    }
  }
  if (!error.empty()) fail(code, error);
}

}  // namespace accel::ops
