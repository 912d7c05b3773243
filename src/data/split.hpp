// Accelerate's split_between_processes as index maths (no LibTorch): which items of an input of
// `n` items each process takes for distributed inference, with and without padding. Follows
// Accelerate 1.15.0 (its state.py), where lists and tensors split alike.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::data {

// This process's contiguous slice: the first n mod P processes take one item more; a process past
// the end takes none. With one process: the whole input.
struct SplitSlice {
  int64_t start = 0;
  int64_t length = 0;
};
SplitSlice split_slice(int64_t n, int num_processes, int process_index);

// The item indexes a process takes from a list or the rows it takes from a tensor of n rows: its
// slice, and with `apply_padding` (P > 1) the input's last item repeated until it holds as many as
// the longest slice, ceil(n / P). An empty input stays empty on every process (Accelerate raises
// IndexError there, reading the last item it does not need). Throws accel::Error
// (invalid_argument) for a negative n or a process outside 0..P-1.
std::vector<int64_t> split_list_indices(int64_t n, int num_processes, int process_index,
                                        bool apply_padding);
std::vector<int64_t> split_tensor_indices(int64_t n, int num_processes, int process_index,
                                          bool apply_padding);

// The items every process holds after padding: the longest slice, ceil(n / P).
int64_t split_padded_rows(int64_t n, int num_processes);

}  // namespace accel::data
