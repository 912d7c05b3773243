#include "zero/owner_gather.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

namespace accel::zero {

namespace {

int64_t byte_size(const at::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

// Each parameter's bytes start on a word, so that viewing them as any dtype is aligned.
int64_t padded(int64_t bytes) {
  return (bytes + 7) / 8 * 8;
}

// The tensor's bytes, flat (a parameter is contiguous; a host's may not be: then a copy).
at::Tensor bytes_of(const at::Tensor& t) {
  return t.detach().contiguous().reshape({-1}).view(at::kByte);
}

// The same memory as `t` under a version counter of its own: writing the owner's value through it
// is not a modification autograd must see (stage 3 gathers parameters that a forward saved for
// backward).
at::Tensor alias_of(const at::Tensor& t) {
  return at::empty({0}, t.options().requires_grad(false))
      .set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

}  // namespace

struct OwnerGather::Chunk {
  size_t first = 0, last = 0;  // parameters [first, last)
  bool in_place = false;       // one large parameter, straight into the tensors
  at::Tensor mine, all;        // otherwise: this rank's part and everyone's
  std::vector<int64_t> part;   // each rank's bytes
  std::shared_ptr<runtime::PendingGather> pending;
};

OwnerGather::OwnerGather(runtime::Communicator& comm, std::vector<at::Tensor> params,
                         std::vector<int> owners, bool pipelined, int64_t chunk_bytes)
    : comm_(comm), params_(std::move(params)), owners_(std::move(owners)) {
  if (params_.empty()) return;
  c10::NoGradGuard no_grad;
  // The chunks: consecutive parameters up to chunk_bytes; a larger one alone.
  int64_t used = 0, largest = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t b = padded(byte_size(params_[k]));
    const bool alone = b > chunk_bytes;
    if (chunks_.empty() || alone || chunks_.back().in_place || used + b > chunk_bytes) {
      chunks_.emplace_back();
      chunks_.back().first = k;
      used = 0;
    }
    chunks_.back().last = k + 1;
    chunks_.back().in_place =
        alone && params_[k].is_contiguous() && params_[k].device() == comm_.wire_device(params_[k]);
    used += b;
    if (!chunks_.back().in_place) largest = std::max(largest, used);
  }
  const auto options =
      params_.front().options().dtype(at::kByte).device(comm_.wire_device(params_.front()));
  at::Tensor shared_mine, shared_all;  // reused chunk after chunk when not pipelined
  for (Chunk& c : chunks_) {
    if (!c.in_place) {
      if (pipelined) {
        int64_t bytes = 0;
        for (size_t k = c.first; k < c.last; ++k) bytes += padded(byte_size(params_[k]));
        c.mine = at::empty({bytes}, options);
        c.all = at::empty({bytes}, options);
      } else {
        if (!shared_mine.defined()) {
          shared_mine = at::empty({largest}, options);
          shared_all = at::empty({largest}, options);
        }
        c.mine = shared_mine;
        c.all = shared_all;
      }
    }
    start(c);
    if (!pipelined) complete(c);
  }
  if (!pipelined) finished_ = true;
}

// Over a failed collective the group is unusable anyway; what is in flight is left to it.
OwnerGather::~OwnerGather() = default;

void OwnerGather::start(Chunk& c) {
  const int rank = comm_.rank();
  c.part.assign(comm_.size(), 0);
  if (c.in_place) {
    at::Tensor whole = bytes_of(alias_of(params_[c.first]));
    c.part[owners_[c.first]] = byte_size(params_[c.first]);
    c.pending = comm_.all_gather_bytes_start(whole, c.part, whole);
    return;
  }
  // Each rank's part is the bytes of the parameters it owns, in order, each padded to a word (so
  // that any dtype can view them where they land).
  for (size_t k = c.first; k < c.last; ++k) {
    const int64_t b = byte_size(params_[k]);
    if (owners_[k] == rank) c.mine.narrow(0, c.part[owners_[k]], b).copy_(bytes_of(params_[k]));
    c.part[owners_[k]] += padded(b);
  }
  c.pending = comm_.all_gather_bytes_start(c.mine, c.part, c.all);
}

void OwnerGather::complete(Chunk& c) {
  comm_.all_gather_bytes_finish(c.pending);
  c.pending.reset();
  if (c.in_place) return;
  std::vector<int64_t> start(comm_.size(), 0);  // where each rank's part landed in `all`
  for (int r = 1; r < comm_.size(); ++r) start[r] = start[r - 1] + c.part[r - 1];
  for (size_t k = c.first; k < c.last; ++k) {
    const int64_t b = byte_size(params_[k]);
    int64_t& offset = start[owners_[k]];
    if (owners_[k] != comm_.rank()) {
      at::Tensor p = alias_of(params_[k]);
      p.copy_(c.all.narrow(0, offset, b).view(p.scalar_type()).view(p.sizes()));
    }
    offset += padded(b);
  }
}

void OwnerGather::finish() {
  if (finished_) return;
  finished_ = true;
  c10::NoGradGuard no_grad;
  for (Chunk& c : chunks_) complete(c);
}

void gather_from_owners(runtime::Communicator& comm, const std::vector<at::Tensor>& params,
                        const std::vector<int>& owners, int64_t chunk_bytes) {
  OwnerGather(comm, params, owners, /*pipelined=*/false, chunk_bytes);
}

}  // namespace accel::zero
