// Prints what libaccel's data rules give each rank, one case per input line, for the differential
// test against Accelerate's own code (accelerate_data_diff.py). Input lines:
//   shard N BS P SPLIT EVEN DROP       map-style (BatchSamplerShard), sequential order
//   stream N BS P SPLIT DROP DISPATCH   a stream of N samples (IterableDatasetShard / dispatcher)
//   split N P PAD                       split_between_processes of a list and of a tensor
// Output: one line per rank, `R: batch|batch|...` with batches as space-separated positions; for
// split `R: list...|tensor...`. Errors print `R: error`.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/shard.hpp"
#include "data/split.hpp"
#include "data/stream_shard.hpp"

namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? " " : "") + std::to_string(v[i]);
  return out;
}

std::string join(const std::vector<std::vector<int64_t>>& batches) {
  std::string out;
  for (size_t i = 0; i < batches.size(); ++i) out += (i ? "|" : "") + join(batches[i]);
  return out;
}

std::string one_rank(const std::string& kind, std::istringstream& in, int rank) {
  int64_t n = 0, bs = 0;
  int P = 0, split = 0, even = 0, drop = 0, dispatch = 0, pad = 0;
  if (kind == "shard") {
    in >> n >> bs >> P >> split >> even >> drop;
    accel::data::ShardSpec s;
    s.dataset_size = n;
    s.batch_size = bs;
    s.num_processes = P;
    s.process_index = rank;
    s.split_batches = split;
    s.even_batches = even && P > 1;
    s.drop_last = drop;
    return join(accel::data::shard_batches(s, accel::data::epoch_order(n, false, 0, 0), 0));
  }
  if (kind == "stream") {
    in >> n >> bs >> P >> split >> drop >> dispatch;
    accel::data::StreamSpec s;
    s.batch_size = bs;
    s.num_processes = P;
    s.process_index = rank;
    s.split_batches = split;
    s.drop_last = drop;
    s.dispatch = dispatch;
    return join(accel::data::stream_epoch(s, n));
  }
  in >> n >> P >> pad;
  const auto list = accel::data::split_list_indices(n, P, rank, pad);
  const auto rows = accel::data::split_tensor_indices(n, P, rank, pad);
  return join(list) + "|" + join(rows);
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream head(line);
    std::string kind;
    int64_t n = 0, bs = 0;
    int P = 0;
    head >> kind >> n;
    if (kind == "split")
      head >> P;
    else
      head >> bs >> P;
    for (int r = 0; r < P; ++r) {
      std::istringstream in(line.substr(kind.size()));
      std::string text;
      try {
        text = one_rank(kind, in, r);
      } catch (const accel::Error&) {
        text = "error";
      }
      std::cout << r << ": " << text << "\n";
    }
    std::cout << "--\n" << std::flush;
  }
  return 0;
}
