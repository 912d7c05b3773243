// What differs in c10d's TCPStore (torchrun's agent store, which libaccel joins as a client)
// between the lines.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string>

#include "compat/torch_version.hpp"

namespace accel::compat {

// A 2.x client validates the server before its first request, which a torch 1.x server (the
// store of Debian's torchrun) does not answer: it drops the connection. Said in the error, as the
// message alone ("Connection reset by peer") points elsewhere.
inline std::string store_mismatch_hint(const std::string& message, bool hosted_by_launcher) {
#if ACCEL_TORCH2
  if (hosted_by_launcher && (message.find("validate") != std::string::npos ||
                             message.find("reset by peer") != std::string::npos))
    return " (this libaccel runs on LibTorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
           std::to_string(TORCH_VERSION_MINOR) +
           ", whose store client first validates the server; a store hosted by torch 1.x, such "
           "as Debian's torchrun's, drops that request: launch with a torchrun of torch 2.x, with "
           "accel launch, or with torchrun --standalone or --rdzv_backend c10d)";
#else
  (void)message;
  (void)hosted_by_launcher;
#endif
  return "";
}

}  // namespace accel::compat
