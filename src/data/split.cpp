#include "data/split.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"

namespace accel::data {

namespace {

void check(int64_t n, int num_processes, int process_index) {
  if (n < 0) fail(Errc::invalid_argument, "split_between_processes: the item count is negative");
  if (num_processes < 1 || process_index < 0 || process_index >= num_processes)
    fail(Errc::invalid_argument, "split_between_processes: process " +
                                     std::to_string(process_index) + " is not in 0.." +
                                     std::to_string(num_processes - 1));
}

}  // namespace

SplitSlice split_slice(int64_t n, int num_processes, int process_index) {
  check(n, num_processes, process_index);
  if (num_processes == 1) return {0, n};
  const int64_t per = n / num_processes, extras = n % num_processes;
  const int64_t r = process_index;
  return {r * per + std::min(r, extras), per + (r < extras ? 1 : 0)};
}

std::vector<int64_t> split_list_indices(int64_t n, int num_processes, int process_index,
                                        bool apply_padding) {
  const SplitSlice s = split_slice(n, num_processes, process_index);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < s.length; ++i) out.push_back(s.start + i);
  if (!apply_padding || num_processes == 1) return out;
  const auto target = static_cast<size_t>(split_padded_rows(n, num_processes));
  while (out.size() < target) out.push_back(n - 1);  // the input's last item, not the slice's
  return out;
}

std::vector<int64_t> split_tensor_indices(int64_t n, int num_processes, int process_index,
                                          bool apply_padding) {
  return split_list_indices(n, num_processes, process_index, apply_padding);
}

int64_t split_padded_rows(int64_t n, int num_processes) {
  return (n + num_processes - 1) / num_processes;
}

}  // namespace accel::data
