// The one file that sees ProcessGroupGloo.hpp, which includes gloo's headers. Debian's LibTorch
// comes with its gloo (libgloo-dev). The 2.x wheels carry gloo inside libtorch_cpu.so but ship no
// gloo headers, so the 2.x line parses this file with libgloo-dev's: that is sound because
// ProcessGroupGloo holds every gloo object through a pointer (its layout does not depend on
// gloo's), and this file calls only ProcessGroupGloo's out-of-line members, never gloo's inline
// code (the store adapter whose interface differs between gloo versions is not touched here).
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "compat/process_group.hpp"

namespace accel::compat {

c10::intrusive_ptr<Group> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int size, std::chrono::milliseconds timeout,
                                          const GlooEndpoint& endpoint, int threads) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!endpoint.interface.empty())
    options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(endpoint.interface));
  else if (!endpoint.address.empty())
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(endpoint.address));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  options->threads = threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

}  // namespace accel::compat
