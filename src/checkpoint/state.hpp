// save_state / load_state: everything an exact resume needs, in language-neutral files (safetensors
// and JSON), listed with checksums in a manifest, written into a directory committed atomically.
#pragma once

#include <string>

#include "prepare/session.hpp"

namespace accel::checkpoint {

// Collective: every rank calls it. The main process writes the models, optimizers (state tensors
// and options), schedulers, loss scaler, dataloader cursors and configuration; every rank writes
// its random generator states; the main process writes the manifest and commits the directory.
// save_on_each_node on several machines: each machine's local main process does the main
// process's part in its own copy of `dir` (machines that share the directory share one copy),
// where its machine's ranks write their random states; every rank's part of a ZeRO-sharded
// optimizer state is copied over the communicator into every copy, so each is complete but for
// the other machines' random states (manifest.json's machine_ranks).
void save_state(prepare::Session& session, const std::string& dir);
// Automatic naming (ProjectConfiguration): project_dir/checkpoints/checkpoint_<n>, then prunes to
// total_limit. Throws accel::Error(invalid_argument) when automatic naming is not configured.
void save_state_automatic(prepare::Session& session);

// Collective and all-or-nothing. Verifies the manifest's sizes and checksums, reads every file and
// checks every key, type, tensor name, shape and dtype against the prepared objects (same number
// and kinds as at save), and only when every rank found everything good restores every piece. A
// failure names the file and key and leaves every object as it was, except the program's
// registered objects, whose load callbacks run (after every check) before the rest is applied.
// A rank that did not exist at save time derives its generator states from rank 0's and its rank.
// Each rank reads `dir` where it runs, so a machine-local copy (save_on_each_node) serves its
// machine's ranks; every rank must have read the same save (Errc::state otherwise).
void load_state(prepare::Session& session, const std::string& dir);
// Loads the newest project_dir/checkpoints/checkpoint_<n> (with save_on_each_node on several
// machines, the newest every machine holds) and numbers the next save n + 1.
void load_state_automatic(prepare::Session& session);

}  // namespace accel::checkpoint
