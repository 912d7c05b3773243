#include "zero/optimizer_shard.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "zero/partition.hpp"

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

}  // namespace

OptimizerShard::OptimizerShard(runtime::Communicator& comm, std::vector<at::Tensor> params)
    : comm_(comm), params_(std::move(params)) {
  std::vector<int64_t> sizes;
  for (const auto& p : params_) sizes.push_back(byte_size(p));
  owner_ = assign_owners(sizes, comm_.size());
  for (int o : owner_) owned_.push_back(o == comm_.rank());
}

void OptimizerShard::gather_parameters(int64_t chunk_bytes) {
  if (params_.empty()) return;
  c10::NoGradGuard no_grad;
  const auto options =
      params_.front().options().dtype(at::kByte).device(comm_.wire_device(params_.front()));
  at::Tensor mine = at::empty({chunk_bytes}, options), all = at::empty({chunk_bytes}, options);
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
      // Larger than a chunk: it travels alone, from the owner's tensor straight into the others'
      // storage (a host's tensor that is not contiguous, or not where the wire is, goes through
      // buffers of its own size).
      if (params_[k].is_contiguous() && params_[k].device() == comm_.wire_device(params_[k])) {
        at::Tensor in_place = bytes_of(params_[k]);
        std::vector<int64_t> part(comm_.size(), 0);
        part[owner_[k]] = byte_size(params_[k]);
        comm_.all_gather_bytes(in_place, part, in_place);
      } else {
        at::Tensor own_mine = at::empty({b}, options), own_all = at::empty({b}, options);
        exchange_chunk(own_mine, own_all, k, k + 1);
      }
      first = k + 1;
      continue;
    }
    used += b;
  }
  if (first < params_.size()) exchange_chunk(mine, all, first, params_.size());
}

// Parameters [first, last): each rank's part is the bytes of those it owns, in order, each padded
// to a word (so that any dtype can view them where they land).
void OptimizerShard::exchange_chunk(at::Tensor& mine, at::Tensor& all, size_t first, size_t last) {
  std::vector<int64_t> part(comm_.size(), 0);
  for (size_t k = first; k < last; ++k) {
    const int64_t b = byte_size(params_[k]);
    if (owned_[k]) mine.narrow(0, part[owner_[k]], b).copy_(bytes_of(params_[k]));
    part[owner_[k]] += padded(b);
  }
  comm_.all_gather_bytes(mine, part, all);
  std::vector<int64_t> start(comm_.size(), 0);  // where each rank's part landed in `all`
  for (int r = 1; r < comm_.size(); ++r) start[r] = start[r - 1] + part[r - 1];
  for (size_t k = first; k < last; ++k) {
    const int64_t b = byte_size(params_[k]);
    int64_t& offset = start[owner_[k]];
    if (!owned_[k]) {
      at::Tensor p = params_[k].detach();
      p.copy_(all.narrow(0, offset, b).view(p.scalar_type()).view(p.sizes()));
    }
    offset += padded(b);
  }
}

}  // namespace accel::zero
