// A checkpoint's manifest (manifest.json): every file with its size and CRC-32, the library
// version, the number of processes and the step. Loading verifies it, so an incomplete or corrupt
// checkpoint is refused with the file at fault. Pure C++ (nlohmann-json, zlib); the parser is
// fuzzed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::checkpoint {

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory, no ".." and no leading '/'
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  std::string library_version;
  int num_processes = 1;
  int64_t step = 0;
  // A fingerprint of the save's per-rank files, written into each of them too (their safetensors
  // metadata), so that a load knows each part as this save's; empty in checkpoints of 0.2.4 and
  // before.
  std::string save_id;
  // save_on_each_node with several machines: this machine-local copy holds the per-rank files
  // (random states) of these ranks only, ascending; every other file is complete. Empty: every
  // rank's (a directory all machines share, or one machine).
  std::vector<int> machine_ranks;
  std::vector<ManifestFile> files;
};

std::string to_json(const Manifest& m);
// Throws accel::Error(io) naming `name` for invalid JSON, a missing or mistyped field, a path
// that leaves the directory, or machine_ranks that are not ascending ranks below num_processes.
Manifest parse_manifest(const std::string& text, const std::string& name);

// The ranks whose per-rank files the checkpoint holds: machine_ranks, or 0..num_processes-1.
std::vector<int> ranks_held(const Manifest& m);

// Size and CRC-32 of a file. Throws accel::Error(io) when it cannot be read.
ManifestFile describe_file(const std::string& dir, const std::string& relative);
// Checks every file listed: present, same size, same CRC-32. Throws accel::Error(io) naming the
// first that differs.
void verify(const std::string& dir, const Manifest& m);

}  // namespace accel::checkpoint
