// Accelerate's split_between_processes as index maths (no LibTorch): which items of an input of
// `n` items each process takes for distributed inference, with and without padding.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::data {

// This process's contiguous slice: the first n mod P processes take one item more. A process
// whose slice would start past the end takes the input's last item (Accelerate's inputs[-1:]).
// With one process: the whole input.
struct SplitSlice {
  int64_t start = 0;
  int64_t length = 0;
};
SplitSlice split_slice(int64_t n, int num_processes, int process_index);

// The item indexes a process takes from a list (Accelerate's list and tuple semantics): its slice,
// and with `apply_padding` the slice's last item repeated until it holds n / P + 1 items (also
// when P divides n: Accelerate pads every process to that). Throws accel::Error(invalid_argument)
// for padding an empty input on more than one process (there is no item to repeat).
std::vector<int64_t> split_list_indices(int64_t n, int num_processes, int process_index,
                                        bool apply_padding);

// The row indexes a process takes from a tensor of n rows (Accelerate's tensor semantics): its
// slice, and with `apply_padding` (P > 1) the input's last row repeated up to the longest slice.
// Throws accel::Error(invalid_argument) for padding an empty input on more than one process.
std::vector<int64_t> split_tensor_indices(int64_t n, int num_processes, int process_index,
                                          bool apply_padding);

// The rows every process holds after padding a tensor (Accelerate's tensor semantics: the longest
// slice; the padding rows repeat the input's last row).
int64_t split_padded_rows(int64_t n, int num_processes);

}  // namespace accel::data
