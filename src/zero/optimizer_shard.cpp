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

void OptimizerShard::gather_parameters(const std::function<bool(const at::Tensor&)>& which,
                                       int64_t chunk_bytes) {
  if (!which) return gather_from_owners(comm_, params_, owner_, chunk_bytes);
  std::vector<at::Tensor> params;
  std::vector<int> owners;
  for (size_t k = 0; k < params_.size(); ++k)
    if (which(params_[k])) {
      params.push_back(params_[k]);
      owners.push_back(owner_[k]);
    }
  if (!params.empty()) gather_from_owners(comm_, params, owners, chunk_bytes);
}

}  // namespace accel::zero
