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

class OwnerGather {
 public:
  OwnerGather(runtime::Communicator& comm, const std::vector<at::Tensor>& params,
              const std::vector<int>& owners)
      : comm_(comm), params_(params), owner_(owners) {}

  void run(int64_t chunk_bytes) {
    const auto options =
        params_.front().options().dtype(at::kByte).device(comm_.wire_device(params_.front()));
    // The buffers are as large as the largest chunk, not the limit: a unit of one large weight and
    // its bias needs a few bytes of them.
    int64_t largest = 0, used_now = 0;
    for (const auto& p : params_) {
      const int64_t b = padded(byte_size(p));
      if (b > chunk_bytes) continue;
      used_now = used_now + b > chunk_bytes ? b : used_now + b;
      largest = std::max(largest, used_now);
    }
    at::Tensor mine = at::empty({largest}, options), all = at::empty({largest}, options);
    size_t first = 0;
    int64_t used = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      const int64_t b = padded(byte_size(params_[k]));
      if (used > 0 && (used + b > chunk_bytes || b > chunk_bytes)) {
        exchange_chunk(mine, all, first, k);
        first = k;
        used = 0;
      }
      if (b > chunk_bytes) {
        alone(k, options);
        first = k + 1;
        continue;
      }
      used += b;
    }
    if (first < params_.size()) exchange_chunk(mine, all, first, params_.size());
  }

 private:
  // Larger than a chunk: from the owner's tensor straight into the others' storage (a host's
  // tensor that is not contiguous, or not where the wire is, goes through buffers of its size).
  void alone(size_t k, const at::TensorOptions& options) {
    const at::Tensor& p = params_[k];
    if (p.is_contiguous() && p.device() == comm_.wire_device(p)) {
      at::Tensor in_place = bytes_of(alias_of(p));
      std::vector<int64_t> part(comm_.size(), 0);
      part[owner_[k]] = byte_size(p);
      comm_.all_gather_bytes(in_place, part, in_place);
    } else {
      const int64_t b = padded(byte_size(p));
      at::Tensor own_mine = at::empty({b}, options), own_all = at::empty({b}, options);
      exchange_chunk(own_mine, own_all, k, k + 1);
    }
  }

  // Parameters [first, last): each rank's part is the bytes of those it owns, in order, each
  // padded to a word (so that any dtype can view them where they land).
  void exchange_chunk(at::Tensor& mine, at::Tensor& all, size_t first, size_t last) {
    const int rank = comm_.rank();
    std::vector<int64_t> part(comm_.size(), 0);
    for (size_t k = first; k < last; ++k) {
      const int64_t b = byte_size(params_[k]);
      if (owner_[k] == rank) mine.narrow(0, part[owner_[k]], b).copy_(bytes_of(params_[k]));
      part[owner_[k]] += padded(b);
    }
    comm_.all_gather_bytes(mine, part, all);
    std::vector<int64_t> start(comm_.size(), 0);  // where each rank's part landed in `all`
    for (int r = 1; r < comm_.size(); ++r) start[r] = start[r - 1] + part[r - 1];
    for (size_t k = first; k < last; ++k) {
      const int64_t b = byte_size(params_[k]);
      int64_t& offset = start[owner_[k]];
      if (owner_[k] != rank) {
        at::Tensor p = alias_of(params_[k]);
        p.copy_(all.narrow(0, offset, b).view(p.scalar_type()).view(p.sizes()));
      }
      offset += padded(b);
    }
  }

  runtime::Communicator& comm_;
  const std::vector<at::Tensor>& params_;
  const std::vector<int>& owner_;
};

}  // namespace

void gather_from_owners(runtime::Communicator& comm, const std::vector<at::Tensor>& params,
                        const std::vector<int>& owners, int64_t chunk_bytes) {
  if (params.empty()) return;
  c10::NoGradGuard no_grad;
  OwnerGather(comm, params, owners).run(chunk_bytes);
}

}  // namespace accel::zero
