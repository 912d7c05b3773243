#include "zero/partition.hpp"

#include <algorithm>
#include <numeric>

namespace accel::zero {

std::vector<int> assign_owners(const std::vector<int64_t>& bytes, int world) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(world, 1)), 0);
  std::vector<int> owner(bytes.size(), 0);
  for (size_t k : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owner[k] = static_cast<int>(lightest);
    load[static_cast<size_t>(lightest)] += bytes[k];
  }
  return owner;
}

}  // namespace accel::zero
