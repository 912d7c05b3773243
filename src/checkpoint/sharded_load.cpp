#include "checkpoint/sharded_load.hpp"

#include <ATen/ATen.h>

#include <mutex>

#include "common/error.hpp"
#include "ops/collectives.hpp"
#include "ops/main_process.hpp"
#include "prepare/session.hpp"

namespace accel::checkpoint {

namespace {

// Whether `m` is one whose parameters stage 3 shards (prepare_model's condition for a ParamShard;
// a model without trainable parameters has nothing released, and loads the same either way).
bool sharded(prepare::Session* s, const model::Model& m) {
  return s && s->is_prepared(&m) && s->accelerator().communicator() &&
         s->accelerator().sharding().stage >= 3;
}

// The tensors a successful load wrote (on the ranks that hold them) are filled; an empty model's
// tensors it did not fill get their layer's initialisation. Only after every rank's writes
// succeeded: the ranks' record of what is still empty stays the same everywhere.
void finish_unloaded(runtime::Communicator* comm, model::Model& m, const PlannedLoad& planned) {
  if (!m.has_unloaded()) return;
  std::vector<std::string> written;
  for (const auto& copy : planned.copies) written.push_back(copy.first);
  m.mark_loaded(written);
  if (!m.has_unloaded()) return;
  // Drawn from rank 0's generator state, the same values on every rank as a single process would
  // draw (a rank whose generator differs, seeded device_specific, gets its own state back after).
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor own;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    own = gen.get_state();
  }
  const at::Tensor main = comm ? ops::broadcast(comm, own, 0) : own;
  const bool same = at::equal(main, own);
  if (!same) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(main);
  }
  m.initialize_unloaded();
  if (!same) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(own);
  }
}

}  // namespace

void load_planned(prepare::Session* session, model::Model& m, const std::string& what,
                  const std::function<PlannedLoad()>& plan) {
  if (!sharded(session, m)) {
    m.require_whole(what);
    PlannedLoad planned = plan();
    write_planned(m, planned);
    finish_unloaded(nullptr, m, planned);
    return;
  }
  auto& acc = session->accelerator();
  PlannedLoad planned;
  ops::run_on_all(acc, [&] { planned = plan(); });  // no rank writes unless every rank can
  // An empty model prepared under stage 3 has nothing to gather: each rank reads its share
  // whether or not fsdp_cpu_ram_efficient_loading is set.
  if (acc.sharding().cpu_ram_efficient_loading || m.has_unloaded()) {
    ops::run_on_all(acc, [&] { write_planned(m, planned); });
  } else {
    const prepare::Session::WholeParameters whole(*session);  // gathers; released when it ends
    ops::run_on_all(acc, [&] { write_planned(m, planned); });
  }
  finish_unloaded(acc.communicator(), m, planned);
}

}  // namespace accel::checkpoint
