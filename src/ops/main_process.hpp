// Work that only the main process does while every process waits for its outcome: the main
// process runs it, and every rank returns alike, with the main process's error class and message.
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

}  // namespace accel::ops
