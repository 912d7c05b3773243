// The communicator's collectives: shared memory where every rank is on this machine, the TCP
// ring (or Gloo) otherwise, NCCL for this rank's device; each behind guarded(), which classifies a
// failure and names the peer behind it.
#include <algorithm>
#include <functional>

#include "common/interrupt.hpp"
#include "runtime/communicator_impl.hpp"

namespace accel::runtime {

using detail::classify;
using detail::what_of;

namespace {

// Waits for a Gloo work in slices, so that an interruption is seen while a peer is late. Work's
// timed wait throws when the slice ends first; the work may complete right after, so a work found
// completed is waited on once more, which gives its own outcome (its error, or none). NCCL's work
// is waited on as it is: a timed wait would block the CPU on the stream (and may abort the
// communicator when the slice ends).
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, bool on_gpu) {
  if (on_gpu) {
    work->wait();
    return;
  }
  for (;;) {
    interrupt::check("waiting for the other processes");
    try {
      if (work->wait(interrupt::kPollSlice)) return;
    } catch (...) {
      if (work->isCompleted()) {
        work->wait();
        return;
      }
    }
  }
}

// The ring's element type for a tensor's dtype.
net::DType net_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return net::DType::kF32;
    case at::kDouble:
      return net::DType::kF64;
    case at::kHalf:
      return net::DType::kF16;
    case at::kBFloat16:
      return net::DType::kBF16;
    case at::kChar:
      return net::DType::kI8;
    case at::kByte:
      return net::DType::kU8;
    case at::kShort:
      return net::DType::kI16;
    case at::kInt:
      return net::DType::kI32;
    case at::kLong:
      return net::DType::kI64;
    default:
      fail(Errc::dtype, std::string("a collective cannot reduce ") +
                            c10::toString(t.scalar_type()) + " tensors");
  }
}

net::Op net_op(ReduceOp op) {
  return op == ReduceOp::kSum   ? net::Op::kSum
         : op == ReduceOp::kMax ? net::Op::kMax
                                : net::Op::kMin;
}

size_t byte_size(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

}  // namespace

// A CPU collective over the TCP ring (not Gloo, not a device's group).
bool Communicator::on_ring(const at::Tensor& t) const {
  return impl_->ring && !t.is_cuda();
}

template <class F>
void Communicator::guarded(const char* what, F&& body) {
  if (!broken_.empty())
    fail(Errc::state, std::string(what) +
                          ": the process group is unusable after an earlier failure: " + broken_);
  std::string msg;
  Errc code = Errc::torch;
  try {
    interrupt::check(what);
    body();
    return;
  } catch (const accel::Error& e) {
    if (e.code() == Errc::cancelled) {
      // The peers are inside this collective (or will be): its order is lost for good.
      broken_ = std::string(what) + " was interrupted on rank " + std::to_string(rank_);
      throw;
    }
    // The ring stops at a disagreement between the ranks (or its closing): it is unusable.
    if (e.code() == Errc::state) {
      broken_ = e.what();
      throw;
    }
    // The shared-memory and TCP transports report their failures classified already.
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
  const std::vector<unsigned char*> copies =
      only ? std::vector<unsigned char*>{} : peer_copies(tensor);
  guarded("all_reduce", [&] {
    if (!copies.empty())
      impl_->shm->all_reduce_mapped(copies, static_cast<size_t>(tensor.numel()), type, shm_op,
                                    collective_timeout_);
    else
      impl_->shm->all_reduce(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type, shm_op,
                             collective_timeout_, only);
  });
  return true;
}

std::vector<unsigned char*> Communicator::peer_copies(const at::Tensor& tensor) const {
  if (impl_->mapped.empty() || !tensor.defined() || !tensor.device().is_cpu()) return {};
  const auto it = impl_->mapped.find(tensor.data_ptr());
  if (it == impl_->mapped.end()) return {};
  const auto copies = it->second.lock();
  const size_t bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  if (!copies || !tensor.is_contiguous() || copies->copies[rank_].bytes() != bytes) return {};
  std::vector<unsigned char*> out;
  for (const SharedBuffer& b : copies->copies) out.push_back(b.data());
  return out;
}

bool Communicator::maps_peers(const at::Tensor& tensor) const {
  return !peer_copies(tensor).empty();
}

bool Communicator::all_agree(bool ok) {
  int32_t value = ok ? 1 : 0;
  guarded("all_reduce", [&] {
    impl_->shm->all_reduce(&value, 1, ShmType::kI32, ShmOp::kMin, collective_timeout_);
  });
  return value == 1;
}

// Each rank makes its copy under a name every rank can tell (the segment's stem, the buffer's
// number, the rank), all agree that every copy exists, each maps the others', and all agree again
// before the names go. Any failure on any rank (a full /dev/shm, say) gives every rank an
// ordinary tensor.
at::Tensor Communicator::shared_zeros(int64_t numel, const at::TensorOptions& options) {
  const auto dtype = options.dtype().toScalarType();
  const bool reducible =
      dtype == at::kFloat || dtype == at::kDouble || dtype == at::kInt || dtype == at::kLong;
  if (!impl_->shm || options.device().type() != c10::kCPU || !reducible || numel <= 0)
    return at::zeros({numel}, options);
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  const std::string stem = impl_->shm_name + "-b" + std::to_string(impl_->shared_made++) + "-r";
  auto mapped = std::make_shared<Impl::MappedCopies>();
  mapped->copies.resize(static_cast<size_t>(size_));
  const std::string mine = stem + std::to_string(rank_);
  bool made = false;
  try {
    mapped->copies[rank_] = SharedBuffer::create(mine, bytes);
    made = true;
  } catch (const accel::Error&) {
  }
  bool ok = false;
  try {
    ok = all_agree(made);
    for (int r = 0; ok && r < size_; ++r) {
      if (r == rank_) continue;
      try {
        mapped->copies[r] = SharedBuffer::attach(stem + std::to_string(r), bytes);
      } catch (const accel::Error&) {
        ok = false;
      }
    }
    ok = all_agree(ok);
  } catch (...) {
    if (made) SharedBuffer::unlink(mine);  // a peer failed: no name may outlive the job
    throw;
  }
  if (made) SharedBuffer::unlink(mine);
  if (!ok) return at::zeros({numel}, options);
  void* data = mapped->copies[rank_].data();
  for (auto it = impl_->mapped.begin(); it != impl_->mapped.end();)
    it = it->second.expired() ? impl_->mapped.erase(it) : std::next(it);
  impl_->mapped[data] = mapped;
  // The storage keeps every mapping: a gradient the host still holds outlives the communicator.
  return at::from_blob(
      data, {numel}, [mapped](void*) {}, options.requires_grad(false));
}

std::vector<at::Tensor> Communicator::all_gather(const at::Tensor& tensor) {
  if (on_ring(tensor)) {
    const at::Tensor mine = tensor.contiguous();
    at::Tensor all = at::empty({size_, mine.numel()}, mine.options());
    all.select(0, rank_).copy_(mine.view({-1}));
    const std::vector<size_t> bytes_of(static_cast<size_t>(size_), byte_size(mine));
    guarded("all_gather", [&] {
      impl_->sequencer->run([&] { impl_->ring->all_gather(all.data_ptr(), bytes_of); });
    });
    std::vector<at::Tensor> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.select(0, r).view(tensor.sizes()));
    return out;
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty_like(tensor));
  std::vector<at::Tensor> inputs{tensor};
  guarded("all_gather",
          [&] { wait_for(impl_->group_for(tensor).allgather(outputs, inputs), tensor.is_cuda()); });
  return outputs[0];
}

struct PendingGather {
  c10::intrusive_ptr<c10d::Work> work;
  std::shared_ptr<net::Sequencer::Ticket> ticket;  // over the TCP ring: straight into `out`
  std::vector<std::vector<at::Tensor>> parts;  // the padded all-gather's outputs; empty: broadcast
  std::vector<at::Tensor> inputs;              // kept alive while the work runs
  at::Tensor out;
  std::vector<int64_t> bytes_of;
  bool on_gpu = false;
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
  if (on_ring(mine)) {
    std::vector<int64_t> offset(bytes_of.size() + 1, 0);
    for (size_t r = 0; r < bytes_of.size(); ++r) offset[r + 1] = offset[r] + bytes_of[r];
    at::Tensor part = out.narrow(0, offset[rank_], bytes_of[rank_]);
    const at::Tensor from = mine.narrow(0, 0, bytes_of[rank_]);
    if (from.data_ptr() != part.data_ptr()) part.copy_(from);  // else in place
    net::Ring* ring = impl_->ring.get();
    at::Tensor whole = out;
    std::function<void()> job;
    const auto givers =
        std::count_if(bytes_of.begin(), bytes_of.end(), [](int64_t b) { return b != 0; });
    if (givers == 1) {
      // One rank's bytes: a pipelined broadcast from it, rather than a ring of empty parts.
      const int root = static_cast<int>(
          std::find_if(bytes_of.begin(), bytes_of.end(), [](int64_t b) { return b != 0; }) -
          bytes_of.begin());
      const auto at = static_cast<size_t>(offset[root]);
      const auto bytes = static_cast<size_t>(bytes_of[root]);
      job = [ring, whole, at, bytes, root] {
        ring->broadcast(static_cast<unsigned char*>(whole.data_ptr()) + at, bytes, root);
      };
    } else {
      const std::vector<size_t> sizes(bytes_of.begin(), bytes_of.end());
      job = [ring, whole, sizes] { ring->all_gather(whole.data_ptr(), sizes); };
    }
    guarded("all_gather", [&] { pending->ticket = impl_->sequencer->start(std::move(job)); });
    return pending;
  }
  pending->out = out;
  pending->bytes_of = bytes_of;
  pending->on_gpu = mine.is_cuda();
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
  if (pending->ticket) {
    guarded("all_gather", [&] { impl_->sequencer->finish(pending->ticket); });
    return;
  }
  if (!pending->work) return;  // done already, in shared memory
  guarded("all_gather", [&] { wait_for(pending->work, pending->on_gpu); });
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
  if (on_ring(tensor)) {
    const net::DType type = net_type(tensor);
    at::Tensor flat = tensor.contiguous();
    guarded("all_reduce", [&] {
      impl_->sequencer->run([&] {
        impl_->ring->all_reduce(flat.data_ptr(), static_cast<size_t>(flat.numel()), type,
                                net_op(op), false);
      });
    });
    if (!flat.is_same(tensor)) tensor.copy_(flat);
    return;
  }
  c10d::AllreduceOptions options;
  options.reduceOp = op == ReduceOp::kSum   ? c10d::ReduceOp::SUM
                     : op == ReduceOp::kMax ? c10d::ReduceOp::MAX
                                            : c10d::ReduceOp::MIN;
  std::vector<at::Tensor> tensors{tensor};
  guarded("all_reduce", [&] {
    wait_for(impl_->group_for(tensor).allreduce(tensors, options), tensor.is_cuda());
  });
}

void Communicator::broadcast(at::Tensor& tensor, int root) {
  if (on_ring(tensor)) {
    at::Tensor flat = tensor.contiguous();
    guarded("broadcast", [&] {
      impl_->sequencer->run(
          [&] { impl_->ring->broadcast(flat.data_ptr(), byte_size(flat), root); });
    });
    if (!flat.is_same(tensor)) tensor.copy_(flat);
    return;
  }
  c10d::BroadcastOptions options;
  options.rootRank = root;
  std::vector<at::Tensor> tensors{tensor};
  guarded("broadcast", [&] {
    wait_for(impl_->group_for(tensor).broadcast(tensors, options), tensor.is_cuda());
  });
}

struct PendingReduce {
  c10::intrusive_ptr<c10d::Work> work;
  std::shared_ptr<net::Sequencer::Ticket> ticket;  // over the TCP ring (which averages itself)
  at::Tensor divide;  // defined: divided by the world size once the sum arrived
  bool on_gpu = false;
};

// Through shared memory the reduction runs here, synchronously: it is memory-bound copying and
// summing on this rank's own core, so a separate thread would only compete with backward for it.
std::shared_ptr<PendingReduce> Communicator::all_reduce_start(at::Tensor& tensor, bool average) {
  auto pending = std::make_shared<PendingReduce>();
  if (reduce_in_shared_memory(tensor, ReduceOp::kSum, average)) return pending;
  if (on_ring(tensor)) {
    if (!tensor.is_contiguous()) fail(Errc::internal, "all_reduce_start needs a contiguous tensor");
    const net::DType type = net_type(tensor);
    net::Ring* ring = impl_->ring.get();
    at::Tensor held = tensor;
    guarded("all_reduce", [&] {
      pending->ticket = impl_->sequencer->start([ring, held, type, average] {
        ring->all_reduce(held.data_ptr(), static_cast<size_t>(held.numel()), type, net::Op::kSum,
                         average);
      });
    });
    return pending;
  }
  if (average) pending->divide = tensor;
  pending->on_gpu = tensor.is_cuda();
  std::vector<at::Tensor> tensors{tensor};
  // On a GPU this runs in the gradient hook, on the stream that produced the gradient: NCCL's
  // stream waits on that one before reading the bucket, and the bucket stays allocated for the
  // whole run (NCCL records it on its stream).
  guarded("all_reduce", [&] { pending->work = impl_->group_for(tensor).allreduce(tensors); });
  return pending;
}

void Communicator::all_reduce_finish(const std::shared_ptr<PendingReduce>& pending) {
  if (pending->ticket) {
    guarded("all_reduce", [&] { impl_->sequencer->finish(pending->ticket); });
    return;
  }
  if (!pending->work) return;  // done already, in shared memory
  guarded("all_reduce", [&] { wait_for(pending->work, pending->on_gpu); });
  if (pending->divide.defined()) pending->divide.div_(static_cast<double>(size_));
}

void Communicator::reduce_for(at::Tensor& tensor, bool average,
                              const std::vector<std::pair<int64_t, int64_t>>& mine) {
  const std::vector<std::pair<size_t, size_t>> only(mine.begin(), mine.end());
  if (reduce_in_shared_memory(tensor, ReduceOp::kSum, average, &only)) return;
  all_reduce_finish(all_reduce_start(tensor, average));
}

void Communicator::reduce_scatter(at::Tensor& tensor, bool average) {
  if (!on_ring(tensor) || !tensor.is_contiguous()) {
    all_reduce_finish(all_reduce_start(tensor, average));
    return;
  }
  const net::DType type = net_type(tensor);
  guarded("reduce_scatter", [&] {
    impl_->sequencer->run([&] {
      impl_->ring->reduce_scatter(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type,
                                  net::Op::kSum, average);
    });
  });
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
  if (impl_->ring) {
    guarded("barrier", [&] { impl_->sequencer->run([&] { impl_->ring->barrier(); }); });
    return;
  }
  guarded("barrier", [&] { wait_for(impl_->group->barrier(), false); });
}

}  // namespace accel::runtime
