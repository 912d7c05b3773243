#include "launch/store_host.hpp"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/error.hpp"

namespace accel::launch {

struct StoreHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreHost::StoreHost(int port) : impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(30);
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    fail(Errc::rendezvous, "could not open the rendezvous store on port " + std::to_string(port) +
                               ": " + msg +
                               (port ? " (is the port in use? leave --main_process_port unset to "
                                       "let accel launch pick a free one)"
                                     : ""));
  }
  port_ = impl_->store->getPort();
}

StoreHost::~StoreHost() = default;

}  // namespace accel::launch
