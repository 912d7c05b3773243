// Decoded copies of compressed dataset files, kept in a cache directory and mapped read-only.
// Every process on the machine that opens the same file maps the same copy (one decoded copy per
// machine, shared through the page cache), and later jobs skip the decoding, as Hugging Face
// datasets' Arrow cache does. A copy is written whole or not at all (an unnamed file, given its
// name once complete), under a lock that dies with the process holding it. Pure logic (POSIX).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace accel::data {

// Bytes mapped read-only; unmapped when the last copy of `mapping` goes.
struct MappedBytes {
  const unsigned char* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<const void> mapping;
};

// Where decoded copies live: ACCEL_DATASETS_CACHE when set ("off": nowhere), else
// $XDG_CACHE_HOME/libaccel/datasets, else $HOME/.cache/libaccel/datasets; "" for nowhere.
std::string decoded_cache_dir(const std::function<const char*(const char*)>& getenv);

// The `bytes` decoded bytes of `source`, mapped from its copy in `dir`. When there is no copy (or
// the source changed since: its path, size, mtime and inode name the copy), `decode` fills a new
// one; what it throws reaches the caller and leaves nothing behind. A process making the same copy
// is waited for, up to `wait`. nullopt, with the reason in *why, when the cache cannot serve (a
// directory that cannot be made, or that others may write to, a full disk): the caller then
// decodes into memory of its own. `bytes` must be above 0.
std::optional<MappedBytes> map_decoded(const std::string& dir, const std::string& source,
                                       size_t bytes,
                                       const std::function<void(unsigned char*)>& decode,
                                       std::string* why,
                                       std::chrono::milliseconds wait = std::chrono::minutes(2));

}  // namespace accel::data
