// A checkpoint loaded into a model wherever its tensors are: whole on this process, or prepared
// under ZeRO stage 3, where each rank holds only the parameters it owns between steps.
// Under stage 3 the load is a collective (every rank calls it, as accel_save_model) and the ranks
// agree on its outcome after planning and after writing. fsdp_cpu_ram_efficient_loading chooses
// how (config::ShardingPlan::cpu_ram_efficient_loading):
//   true   each rank reads the checkpoint's headers and then only the bytes of the tensors it
//          holds, straight into them: no rank holds more than its own parameters plus one tensor;
//   false  Accelerate's way without it: every unit is gathered, every rank reads the whole
//          checkpoint into the whole model, then the units are released again (each rank holds
//          the whole model while it loads).
// Either way the parameters are bitwise those of loading the whole model before accel_prepare.
// A model prepared empty under stage 3 (prepare/empty_model.hpp) takes the first way whatever the
// setting (there is nothing to gather); once every rank wrote its share, the tensors the
// checkpoint lacked get their layer's initialisation, drawn alike on every rank from rank 0's
// generator state, as a single process's not-strict load draws them.
#pragma once

#include <functional>
#include <string>

#include "checkpoint/model_io.hpp"

namespace accel::prepare {
class Session;
}

namespace accel::checkpoint {

// `plan` (reading headers only) then write_planned into `m`. `session`: the session `m` was
// prepared with, or null (then `m` must be whole on this process: model::Model::require_whole
// with `what`). Throws what `plan` or write_planned throws; under stage 3 a failure on any rank
// fails every rank, and one found while planning leaves every rank's model unchanged.
void load_planned(prepare::Session* session, model::Model& m, const std::string& what,
                  const std::function<PlannedLoad()>& plan);

}  // namespace accel::checkpoint
