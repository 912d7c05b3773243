// Decoded copies of compressed dataset files, kept in a cache directory. Every process on the
// machine that opens the same file reads the same copy (one decoded copy per machine, in the page
// cache), and later jobs skip the decoding, as Hugging Face datasets' Arrow cache does. A copy is
// written whole or not at all (an unnamed file, given its name once complete), under a lock that
// dies with the process holding it. Pure logic (POSIX).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace accel::data {

// A complete decoded copy, open read-only; closed when the last copy of `fd` goes. Read by rows
// (read_copy) rather than mapped: its pages stay in the page cache, the machine's one copy, and out
// of the resident set of every process that reads it.
struct DecodedCopy {
  std::shared_ptr<const int> fd;
  size_t bytes = 0;
};

// Reads `size` bytes at `offset` of the copy into `out`. Throws accel::Error(io) when it cannot.
void read_copy(const DecodedCopy& copy, size_t offset, size_t size, void* out);

// Where decoded copies live: ACCEL_DATASETS_CACHE when set ("off": nowhere), else
// $XDG_CACHE_HOME/libaccel/datasets, else $HOME/.cache/libaccel/datasets; "" for nowhere.
std::string decoded_cache_dir(const std::function<const char*(const char*)>& getenv);

// Receives decoded bytes in order.
using ByteSink = std::function<void(const unsigned char* data, size_t size)>;

// The `bytes` decoded bytes of `source`: its copy in `dir`. When there is no copy (or the source
// changed since: its path, size, mtime and inode name the copy), `decode` writes a new one into the
// sink it is given, all `bytes` of it; what it throws reaches the caller and leaves nothing behind.
// A process making the same copy is waited for, up to `wait`. nullopt, with the reason in *why,
// when the cache cannot serve (a directory that cannot be made, or that others may write to, a full
// disk): the caller then decodes into memory of its own. `bytes` must be above 0.
std::optional<DecodedCopy> open_decoded(const std::string& dir, const std::string& source,
                                        size_t bytes,
                                        const std::function<void(const ByteSink&)>& decode,
                                        std::string* why,
                                        std::chrono::milliseconds wait = std::chrono::minutes(2));

}  // namespace accel::data
