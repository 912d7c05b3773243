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
  const int64_t start = r * per + std::min(r, extras);
  if (start >= n) return {std::max<int64_t>(n - 1, 0), std::min<int64_t>(n, 1)};
  return {start, per + (r < extras ? 1 : 0)};
}

namespace {

// This process's contiguous part, as indexes (before any padding).
std::vector<int64_t> slice_indices(int64_t n, int num_processes, int process_index) {
  const SplitSlice s = split_slice(n, num_processes, process_index);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < s.length; ++i) out.push_back(s.start + i);
  return out;
}

}  // namespace

std::vector<int64_t> split_list_indices(int64_t n, int num_processes, int process_index,
                                        bool apply_padding) {
  std::vector<int64_t> out = slice_indices(n, num_processes, process_index);
  if (!apply_padding || num_processes == 1) return out;
  if (out.empty())
    fail(Errc::invalid_argument,
         "split_between_processes: apply_padding repeats the last item, and the input is empty");
  const auto target = static_cast<size_t>(n / num_processes + 1);
  while (out.size() < target) out.push_back(out.back());
  return out;
}

std::vector<int64_t> split_tensor_indices(int64_t n, int num_processes, int process_index,
                                          bool apply_padding) {
  std::vector<int64_t> out = slice_indices(n, num_processes, process_index);
  if (!apply_padding || num_processes == 1) return out;
  if (n == 0)
    fail(Errc::invalid_argument,
         "split_between_processes: apply_padding repeats the last row, and the tensor has none");
  const auto rows = static_cast<size_t>(split_padded_rows(n, num_processes));
  while (out.size() < rows) out.push_back(n - 1);
  return out;
}

int64_t split_padded_rows(int64_t n, int num_processes) {
  int64_t longest = 0;
  for (int r = 0; r < num_processes; ++r)
    longest = std::max(longest, split_slice(n, num_processes, r).length);
  return longest;
}

}  // namespace accel::data
