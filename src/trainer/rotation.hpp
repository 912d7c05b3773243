// Checkpoint rotation as transformers 4.40's Trainer does it (_sorted_checkpoints,
// _rotate_checkpoints, the end of train's save_total_limit=1 sweep), on directory names rather
// than the file system, and a resumed state's stale best checkpoint. Pure: no LibTorch.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainer/state.hpp"

namespace accel::trainer {

// Python's str(PurePosixPath(p)): repeated and trailing slashes and "." parts dropped.
std::string normal_path(const std::string& path);

// The checkpoint-N directories among `dirs` (names inside output_dir), as output_dir/name paths,
// oldest step first (ties by path); the best one moved to next-to-last so rotation keeps it.
std::vector<std::string> sorted_checkpoints(const std::string& output_dir,
                                            const std::vector<std::string>& dirs,
                                            const std::optional<std::string>& best);

// The paths _rotate_checkpoints deletes after a save: the oldest beyond save_total_limit, never
// the best; a limit of 1 keeps 2 while the newest is not the best, so training can resume.
std::vector<std::string> checkpoints_to_delete(const std::string& output_dir,
                                               const std::vector<std::string>& dirs,
                                               const std::optional<std::string>& best,
                                               std::optional<long long> save_total_limit);

// The end of training with save_total_limit=1 and a best: every checkpoint but the best goes.
std::vector<std::string> checkpoints_to_delete_at_end(const std::string& output_dir,
                                                      const std::vector<std::string>& dirs,
                                                      const std::optional<std::string>& best,
                                                      std::optional<long long> save_total_limit);

// The newest checkpoint-N directory (resume_from_checkpoint=latest; transformers'
// get_last_checkpoint: names exactly "checkpoint-<digits>", the first of equal steps), nullopt
// when none.
std::optional<std::string> latest_checkpoint(const std::string& output_dir,
                                             const std::vector<std::string>& dirs);

// On resume: a best_model_checkpoint that no longer exists (`exists` says; deleted by hand, or
// the run moved) is cleared and the warning to log returned (transformers PR #48319: the resumed
// run crashed at its end on it, and kept one checkpoint too many all along). best_metric stays,
// so early stopping still compares with it; the next save with metrics records a new best.
// Empty when nothing was cleared.
std::string drop_stale_best(TrainerState& state,
                            const std::function<bool(const std::string&)>& exists);

}  // namespace accel::trainer
