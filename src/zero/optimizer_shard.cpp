#include "zero/optimizer_shard.hpp"

#include "zero/owner_gather.hpp"
#include "zero/partition.hpp"

namespace accel::zero {

OptimizerShard::OptimizerShard(runtime::Communicator& comm, std::vector<at::Tensor> params)
    : comm_(comm), params_(std::move(params)) {
  std::vector<int64_t> sizes;
  for (const auto& p : params_) sizes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
  owner_ = assign_owners(sizes, comm_.size());
  for (int o : owner_) owned_.push_back(o == comm_.rank());
}

void OptimizerShard::gather_parameters(int64_t chunk_bytes) {
  gather_from_owners(comm_, params_, owner_, chunk_bytes);
}

}  // namespace accel::zero
