#include "accelerator/batch_size.hpp"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "common/error.hpp"
#include "logging/levels.hpp"
#include "prepare/rewind.hpp"
#include "runtime/tensor_allocator.hpp"

namespace accel {
namespace {

enum Outcome : int64_t { kRan = 0, kOutOfMemory = 1, kFailed = 2 };

struct Try {
  Outcome outcome = kRan;
  Errc code = Errc::internal;
  std::string message;
};

Try run_try(const std::function<void(int64_t)>& attempt, int64_t size) {
  Try t;
  try {
    attempt(size);
  } catch (const accel::Error& e) {
    t.code = e.code();
    t.message = e.what();
  } catch (const std::bad_alloc&) {
    t.code = Errc::out_of_memory;
    t.message = "out of memory";
  } catch (const std::exception& e) {
    t.code = is_out_of_memory_message(e.what()) ? Errc::out_of_memory : Errc::torch;
    t.message = e.what();
  }
  if (!t.message.empty())
    t.outcome = t.code == Errc::out_of_memory || is_out_of_memory_message(t.message.c_str())
                    ? kOutOfMemory
                    : kFailed;
  return t;
}

// Every rank's outcome, in rank order: one all-gather.
std::vector<int64_t> outcomes(runtime::Communicator* comm, Outcome mine) {
  if (!comm) return {mine};
  const std::vector<at::Tensor> all = comm->all_gather(at::full({1}, int64_t{mine}, at::kLong));
  std::vector<int64_t> out;
  for (const at::Tensor& t : all) out.push_back(t.item<int64_t>());
  return out;
}

std::string ranks_with(const std::vector<int64_t>& all, Outcome which) {
  std::string s;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] == which) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

int64_t find_executable_batch_size(Accelerator& acc, int64_t starting,
                                   const std::function<void(int64_t)>& attempt) {
  if (starting < 0)
    fail(Errc::invalid_argument,
         "the starting batch size is negative (" + std::to_string(starting) + ")");
  runtime::Communicator* comm = acc.runtime().communicator();
  for (int64_t size = starting;; size = reduced_batch_size(size)) {
    if (size == 0) fail(Errc::out_of_memory, "No executable batch size found, reached zero.");
    prepare::Rewind before(acc.session());
    const Try mine = run_try(attempt, size);
    const std::vector<int64_t> all = outcomes(comm, mine.outcome);
    if (mine.outcome == kFailed) fail(mine.code, mine.message);
    if (const std::string failed = ranks_with(all, kFailed); !failed.empty())
      fail(Errc::peer_failed, "find_executable_batch_size: rank " + failed +
                                  " failed at batch size " + std::to_string(size) +
                                  " with an error other than running out of memory");
    const std::string short_of_memory = ranks_with(all, kOutOfMemory);
    if (short_of_memory.empty()) return size;
    before.restore();
    runtime::release_cached_tensor_memory();
    if (acc.runtime().is_main_process())  // once per job, as Accelerate's logger
      acc.logger().say(logging::kInfo, "find_executable_batch_size: batch size " +
                                           std::to_string(size) + " ran out of memory on rank " +
                                           short_of_memory + "; trying " +
                                           std::to_string(reduced_batch_size(size)));
  }
}

}  // namespace accel
