// The tensors a safetensors checkpoint holds, from its headers alone: the names, dtypes and shapes
// `accel estimate-memory` needs, without reading a byte of tensor data. Pure C++ (no LibTorch).
#pragma once

#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"

namespace accel::bigmodel {

// The header of one file (checkpoint::parse_header's checks), read alone: its 8-byte length and its
// JSON. The data section is neither read nor required to be there: a file cut after its header (a
// header fetched alone, a download stopped early) is described as the header declares it.
checkpoint::Header read_header_only(const std::string& path);

// Every tensor of the checkpoint, file by file in data order; a name in two files is an error.
std::vector<checkpoint::TensorEntry> checkpoint_tensors(const std::string& path);

}  // namespace accel::bigmodel
