// `accel merge-weights`: one safetensors file of a model's full weights from an accel_save_state
// directory (Accelerate's merge-weights for FSDP's SHARDED_STATE_DICT). libaccel's save_state
// writes every model whole at every ZeRO stage (stage 3 gathers the parameters for the save; only
// optimizer states are written in per-rank parts), so the merge is model_<i>.safetensors checked
// against the save's manifest and copied, byte for byte. Pure C++ (no LibTorch).
#pragma once

#include <string>

namespace accel::checkpoint {

// Where merge_weights writes for `out`: `out` itself when it ends in ".safetensors", otherwise
// `out`/model.safetensors (Accelerate's merge-weights takes a directory).
std::string merged_path(const std::string& out);

// Checks `dir` as a save: manifest.json readable, every file it lists present at its listed size
// (a missing or cut rank file is an error too: the save is incomplete), model_<model>.safetensors
// listed with a valid safetensors header; then copies that file to merged_path(`out`) through a
// temporary file beside it, checking its CRC-32 against the manifest before renaming it into place
// (creating `out` as a directory where needed). Throws accel::Error(io) naming the file at fault,
// or (invalid_argument) a model the save does not hold; on an error nothing is left at the output.
// Returns the path written.
std::string merge_weights(const std::string& dir, const std::string& out, int model = 0);

}  // namespace accel::checkpoint
