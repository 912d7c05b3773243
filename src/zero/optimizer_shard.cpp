#include "zero/optimizer_shard.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

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
  for (int o : assign_owners(sizes, comm_.size())) owned_.push_back(o == comm_.rank());
}

void OptimizerShard::gather_parameters(int64_t chunk_bytes) {
  if (params_.empty()) return;
  c10::NoGradGuard no_grad;
  // int64 words: an integer sum of words whose non-zero bytes never overlap carries nothing.
  const int64_t words = (chunk_bytes + 7) / 8;
  at::Tensor chunk = at::empty({words}, params_.front().options().dtype(at::kLong).device(
                                            comm_.wire_device(params_.front())));
  size_t first = 0;
  int64_t used = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t b = padded(byte_size(params_[k]));
    if (used > 0 && used + b > chunk_bytes) {
      exchange_chunk(chunk, first, k, used);
      first = k;
      used = 0;
    }
    used += b;
    if (used > chunk_bytes) {  // one parameter larger than a chunk: a chunk of its own
      at::Tensor own = at::empty({(used + 7) / 8}, chunk.options());
      exchange_chunk(own, first, k + 1, used);
      first = k + 1;
      used = 0;
    }
  }
  if (used > 0) exchange_chunk(chunk, first, params_.size(), used);
}

void OptimizerShard::exchange_chunk(at::Tensor& chunk, size_t first, size_t last, int64_t bytes) {
  at::Tensor words = chunk.narrow(0, 0, (bytes + 7) / 8);
  words.zero_();
  at::Tensor flat = words.view(at::kByte);
  int64_t offset = 0;
  for (size_t k = first; k < last; ++k) {
    const int64_t b = byte_size(params_[k]);
    if (owned_[k]) flat.narrow(0, offset, b).copy_(bytes_of(params_[k]));
    offset += padded(b);
  }
  comm_.all_reduce(words, runtime::ReduceOp::kSum);
  offset = 0;
  for (size_t k = first; k < last; ++k) {
    const int64_t b = byte_size(params_[k]);
    if (!owned_[k]) {
      at::Tensor p = params_[k].detach();
      p.copy_(flat.narrow(0, offset, b).view(p.scalar_type()).view(p.sizes()));
    }
    offset += padded(b);
  }
}

}  // namespace accel::zero
