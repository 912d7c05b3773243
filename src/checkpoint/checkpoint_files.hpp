// Where a checkpoint's tensors are: the safetensors files a path names (a file, a sharded index, or
// a directory holding either, as transformers names them). Pure C++ (no LibTorch).
#pragma once

#include <string>
#include <vector>

namespace accel::checkpoint {

// The safetensors files a checkpoint path names: a .safetensors file, a sharded index JSON (its
// shards, each once, in name order; a shard named outside the index's directory is refused) or a
// directory holding model.safetensors.index.json or model.safetensors. Throws accel::Error(io).
std::vector<std::string> checkpoint_files(const std::string& path);

}  // namespace accel::checkpoint
