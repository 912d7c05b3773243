// The shared-memory transport of a job on one machine: rank 0 makes the segment, every rank
// attaches, and all agree to use it or none does.
#include <unistd.h>

#include <random>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "runtime/communicator.hpp"
#include "runtime/communicator_impl.hpp"
#include "runtime/shm_reduce.hpp"

namespace accel::runtime {

using detail::what_of;

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

}  // namespace accel::runtime
