// transformers' auto_find_batch_size: the whole training is one try of find_executable_batch_size
// (Trainer.train wraps _inner_training_loop in it), from the training loader's batch size down.
// Beyond transformers, a try that ran out of memory leaves nothing behind: the next one starts
// from what train() started from (parameters, optimizer, schedule, random and data states, the
// tracker records) and the failed try's checkpoints are removed, so the run at the size found is
// the run a program started at that size.
#include <ATen/ATen.h>

#include "accelerator/accelerator.hpp"
#include "accelerator/batch_size.hpp"
#include "checkpoint/atomic_dir.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "data/loader.hpp"
#include "ops/main_process.hpp"
#include "trainer/trainer.hpp"

namespace accel::trainer {

namespace {

// Where a fresh training's start is kept while tries may need it again.
constexpr char kStartDir[] = ".auto_find_batch_size_start";

// The train_batch_size a checkpoint's trainer_state.json recorded: transformers resumes a search
// from it rather than from the configured size.
std::optional<int64_t> recorded_batch_size(const std::string& checkpoint) {
  return TrainerState::from_json(read_file(checkpoint + "/trainer_state.json")).train_batch_size;
}

}  // namespace

void Trainer::train() {
  if (!args_.auto_find_batch_size) {
    train_once();
    return;
  }
  data::DataLoader& loader = *objects_.train;
  int64_t start = loader.batch_size();
  const bool resuming = !args_.resume_from_checkpoint.empty();
  // Resolved once: a failed try's saves would become the "latest".
  const std::string resumed = resuming ? checkpoint_to_resume() : "";
  if (resuming)
    if (const auto recorded = recorded_batch_size(resumed)) start = *recorded;
  // A resumed try starts again from its checkpoint; a fresh one from a save made now.
  const std::string start_dir = args_.output_dir + "/" + kStartDir;
  const auto remove_start = [&] { checkpoint::remove_tree(start_dir); };
  if (!resuming) {
    ops::run_on_main(acc_.runtime(), [&] { make_directories(args_.output_dir, 0777); });
    acc_.save_state(&start_dir);
  }
  int tries = 0;
  try_checkpoints_.clear();
  try {
    const int64_t found = find_executable_batch_size(acc_, start, [&](int64_t size) {
      if (tries++ > 0) start_again(resuming ? nullptr : &start_dir, resumed);
      if (loader.batch_size() != size) loader.set_option("batch_size", std::to_string(size));
      train_once();
    });
    if (found != start)
      acc_.log_message(logging::kInfo, 0,
                       "trainer: auto_find_batch_size trained at batch size " +
                           std::to_string(found) + " (from " + std::to_string(start) + ")");
  } catch (...) {
    // No collective here: the other ranks may be gone or failing differently.
    if (!resuming && acc_.runtime().is_main_process()) remove_start();
    throw;
  }
  if (!resuming) ops::run_on_main(acc_.runtime(), remove_start);
}

void Trainer::start_again(const std::string* start_dir, const std::string& resumed) {
  ops::run_on_main(acc_.runtime(), [&] {
    for (const auto& dir : try_checkpoints_)
      if (dir != resumed) checkpoint::remove_tree(dir);
  });
  try_checkpoints_.clear();
  if (!start_dir) return;  // the try resumes from its checkpoint again (Trainer::resume)
  acc_.load_state(start_dir);
  loaded_state_.reset();  // the start's own, not a checkpoint to resume from
  loaded_loop_.clear();
  acc_.resume_trackers_at(0);
}

}  // namespace accel::trainer
