// The communicator's collectives: shared memory where every rank is on this machine, Gloo
// otherwise, NCCL for this rank's device; each behind guarded(), which classifies a failure and
// names the peer behind it.
#include <algorithm>

#include "runtime/communicator_impl.hpp"

namespace accel::runtime {

using detail::classify;
using detail::what_of;

template <class F>
void Communicator::guarded(const char* what, F&& body) {
  if (!broken_.empty())
    fail(Errc::state, std::string(what) +
                          ": the process group is unusable after an earlier failure: " + broken_);
  std::string msg;
  Errc code = Errc::torch;
  try {
    body();
    return;
  } catch (const accel::Error& e) {
    // The shared-memory transport reports its failures classified already.
    if (e.code() != Errc::timeout && e.code() != Errc::peer_failed) throw;
    msg = e.what();
    code = e.code();
  } catch (const std::exception& e) {
    msg = what_of(e);
    code = classify(e, msg);
  }
  std::string advice;
  if (code == Errc::timeout)
    advice =
        " (collective_timeout: a peer did not take part in time; it may be hung or calling "
        "collectives in a different order)";
  if (code == Errc::peer_failed) advice = " (a peer process exited or its connection broke)";
  const std::string peers = diagnose_peers(msg, code == Errc::peer_failed);
  broken_ = peers.empty() ? msg : peers + " (" + msg + ")";
  fail(code, std::string(what) + " failed on rank " + std::to_string(rank_) + " (host " +
                 host_name() + "): " + (peers.empty() ? "" : peers + ". ") + msg + advice);
}

bool Communicator::reduce_in_shared_memory(at::Tensor& tensor, ReduceOp op, bool average,
                                           const std::vector<std::pair<size_t, size_t>>* only) {
  if (!impl_->shm || !tensor.device().is_cpu() || !tensor.is_contiguous()) return false;
  ShmType type;
  switch (tensor.scalar_type()) {
    case at::kFloat:
      type = ShmType::kF32;
      break;
    case at::kDouble:
      type = ShmType::kF64;
      break;
    case at::kInt:
      type = ShmType::kI32;
      break;
    case at::kLong:
      type = ShmType::kI64;
      break;
    default:
      return false;
  }
  if (average && type != ShmType::kF32 && type != ShmType::kF64) return false;
  const ShmOp shm_op = average                ? ShmOp::kAvg
                       : op == ReduceOp::kSum ? ShmOp::kSum
                       : op == ReduceOp::kMax ? ShmOp::kMax
                                              : ShmOp::kMin;
  guarded("all_reduce", [&] {
    impl_->shm->all_reduce(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type, shm_op,
                           collective_timeout_, only);
  });
  return true;
}

std::vector<at::Tensor> Communicator::all_gather(const at::Tensor& tensor) {
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty_like(tensor));
  std::vector<at::Tensor> inputs{tensor};
  guarded("all_gather", [&] { impl_->group_for(tensor).allgather(outputs, inputs)->wait(); });
  return outputs[0];
}

struct PendingGather {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<std::vector<at::Tensor>> parts;  // the padded all-gather's outputs; empty: broadcast
  std::vector<at::Tensor> inputs;              // kept alive while the work runs
  at::Tensor out;
  std::vector<int64_t> bytes_of;
};

void Communicator::all_gather_bytes(const at::Tensor& mine, const std::vector<int64_t>& bytes_of,
                                    at::Tensor& out) {
  all_gather_bytes_finish(all_gather_bytes_start(mine, bytes_of, out));
}

std::shared_ptr<PendingGather> Communicator::all_gather_bytes_start(
    const at::Tensor& mine, const std::vector<int64_t>& bytes_of, at::Tensor& out) {
  auto pending = std::make_shared<PendingGather>();
  if (impl_->shm && mine.device().is_cpu() && out.device().is_cpu()) {
    const std::vector<size_t> sizes(bytes_of.begin(), bytes_of.end());
    guarded("all_gather", [&] {
      impl_->shm->all_gather(mine.data_ptr(), sizes, out.data_ptr(), collective_timeout_);
    });
    return pending;
  }
  const int64_t largest = *std::max_element(bytes_of.begin(), bytes_of.end());
  if (largest == 0) return pending;
  pending->out = out;
  pending->bytes_of = bytes_of;
  const auto givers = std::count_if(bytes_of.begin(), bytes_of.end(), [](int64_t b) { return b; });
  if (givers == 1) {
    // One rank's bytes: broadcast from it, straight into `out`'s part.
    int root = 0;
    int64_t offset = 0;
    while (bytes_of[root] == 0) offset += bytes_of[root++];
    at::Tensor part = out.narrow(0, offset, bytes_of[root]);
    const at::Tensor from = mine.narrow(0, 0, bytes_of[root]);
    if (rank_ == root && from.data_ptr() != part.data_ptr()) part.copy_(from);  // else in place
    pending->inputs = {part};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    guarded("all_gather",
            [&] { pending->work = impl_->group_for(part).broadcast(pending->inputs, options); });
    return pending;
  }
  at::Tensor padded = at::zeros({largest}, mine.options());
  padded.narrow(0, 0, bytes_of[rank_]).copy_(mine.narrow(0, 0, bytes_of[rank_]));
  pending->inputs = {padded};
  pending->parts.resize(1);
  for (int r = 0; r < size_; ++r) pending->parts[0].push_back(at::empty_like(padded));
  guarded("all_gather", [&] {
    pending->work = impl_->group_for(padded).allgather(pending->parts, pending->inputs);
  });
  return pending;
}

void Communicator::all_gather_bytes_finish(const std::shared_ptr<PendingGather>& pending) {
  if (!pending->work) return;  // done already, in shared memory
  guarded("all_gather", [&] { pending->work->wait(); });
  if (pending->parts.empty()) return;  // broadcast into `out` itself
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    pending->out.narrow(0, offset, pending->bytes_of[r])
        .copy_(pending->parts[0][static_cast<size_t>(r)].narrow(0, 0, pending->bytes_of[r]));
    offset += pending->bytes_of[r];
  }
}

bool Communicator::overlaps_compute() const {
  return !impl_->shm || impl_->device_group;
}

void Communicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (reduce_in_shared_memory(tensor, op)) return;
  c10d::AllreduceOptions options;
  options.reduceOp = op == ReduceOp::kSum   ? c10d::ReduceOp::SUM
                     : op == ReduceOp::kMax ? c10d::ReduceOp::MAX
                                            : c10d::ReduceOp::MIN;
  std::vector<at::Tensor> tensors{tensor};
  guarded("all_reduce", [&] { impl_->group_for(tensor).allreduce(tensors, options)->wait(); });
}

void Communicator::broadcast(at::Tensor& tensor, int root) {
  c10d::BroadcastOptions options;
  options.rootRank = root;
  std::vector<at::Tensor> tensors{tensor};
  guarded("broadcast", [&] { impl_->group_for(tensor).broadcast(tensors, options)->wait(); });
}

struct PendingReduce {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor divide;  // defined: divided by the world size once the sum arrived
};

// Through shared memory the reduction runs here, synchronously: it is memory-bound copying and
// summing on this rank's own core, so a separate thread would only compete with backward for it.
std::shared_ptr<PendingReduce> Communicator::all_reduce_start(at::Tensor& tensor, bool average) {
  auto pending = std::make_shared<PendingReduce>();
  if (reduce_in_shared_memory(tensor, ReduceOp::kSum, average)) return pending;
  if (average) pending->divide = tensor;
  std::vector<at::Tensor> tensors{tensor};
  // On a GPU this runs in the gradient hook, on the stream that produced the gradient: NCCL's
  // stream waits on that one before reading the bucket, and the bucket stays allocated for the
  // whole run (NCCL records it on its stream).
  guarded("all_reduce", [&] { pending->work = impl_->group_for(tensor).allreduce(tensors); });
  return pending;
}

void Communicator::all_reduce_finish(const std::shared_ptr<PendingReduce>& pending) {
  if (!pending->work) return;  // done already, in shared memory
  guarded("all_reduce", [&] { pending->work->wait(); });
  if (pending->divide.defined()) pending->divide.div_(static_cast<double>(size_));
}

void Communicator::reduce_for(at::Tensor& tensor, bool average,
                              const std::vector<std::pair<int64_t, int64_t>>& mine) {
  const std::vector<std::pair<size_t, size_t>> only(mine.begin(), mine.end());
  if (reduce_in_shared_memory(tensor, ReduceOp::kSum, average, &only)) return;
  all_reduce_finish(all_reduce_start(tensor, average));
}

c10::Device Communicator::attached_device() const {
  if (!impl_->device_group) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(impl_->device_index));
}

c10::Device Communicator::wire_device(const at::Tensor& t) const {
  if (impl_->device_group && t.is_cuda() && t.get_device() == impl_->device_index)
    return t.device();
  return c10::Device(c10::kCPU);
}

void Communicator::barrier() {
  guarded("barrier", [&] { impl_->group->barrier()->wait(); });
}

}  // namespace accel::runtime
