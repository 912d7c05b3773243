#include "checkpoint/sharded_load.hpp"

#include "common/error.hpp"
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

}  // namespace

void load_planned(prepare::Session* session, model::Model& m, const std::string& what,
                  const std::function<PlannedLoad()>& plan) {
  if (!sharded(session, m)) {
    m.require_whole(what);
    PlannedLoad planned = plan();
    write_planned(m, planned);
    return;
  }
  auto& acc = session->accelerator();
  PlannedLoad planned;
  ops::run_on_all(acc, [&] { planned = plan(); });  // no rank writes unless every rank can
  if (acc.sharding().cpu_ram_efficient_loading) {
    ops::run_on_all(acc, [&] { write_planned(m, planned); });
    return;
  }
  const prepare::Session::WholeParameters whole(*session);  // gathers; released when it ends
  ops::run_on_all(acc, [&] { write_planned(m, planned); });
}

}  // namespace accel::checkpoint
