#include "checkpoint/merge.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "checkpoint/manifest.hpp"
#include "checkpoint/safetensors.hpp"
#include "common/error.hpp"
#include "common/files.hpp"

namespace accel::checkpoint {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool stat_of(const std::string& path, struct stat& st) {
  return ::stat(path.c_str(), &st) == 0;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The save's manifest, or an error saying what `dir` is instead.
Manifest read_manifest(const std::string& dir) {
  struct stat st {};
  if (!stat_of(dir, st)) fail(Errc::io, sys_error("cannot read '" + dir + "'", errno));
  if (!S_ISDIR(st.st_mode))
    fail(Errc::io, "'" + dir +
                       "' is not a directory (merge-weights reads an accel_save_state "
                       "directory)");
  const std::string path = dir + "/manifest.json";
  if (!stat_of(path, st)) {
    std::string hint;
    if (stat_of(dir + "/model.safetensors", st) ||
        stat_of(dir + "/model.safetensors.index.json", st))
      hint = "; it holds accel_save_model's files, which load as they are";
    fail(Errc::io,
         "'" + dir + "' is not an accel_save_state directory: it has no manifest.json" + hint);
  }
  return parse_manifest(read_file(path), path);
}

// Every file the manifest lists is there at its size: a rank's file missing or cut means the save
// is incomplete, whichever file it is.
void check_listed_files(const std::string& dir, const Manifest& m) {
  for (const auto& f : m.files) {
    const std::string path = dir + "/" + f.path;
    struct stat st {};
    if (!stat_of(path, st))
      fail(Errc::io, "'" + path + "', listed in '" + dir +
                         "/manifest.json', is missing: the save is incomplete");
    if (static_cast<uint64_t>(st.st_size) != f.size)
      fail(Errc::io, "'" + path + "' has " + std::to_string(st.st_size) +
                         " bytes; manifest.json says " + std::to_string(f.size) +
                         " (truncated or altered)");
  }
}

// Model `model`'s file; an error naming how many models the save holds otherwise.
const ManifestFile& model_entry(const std::string& dir, const Manifest& m, int model) {
  auto find = [&m](int i) -> const ManifestFile* {
    for (const auto& f : m.files)
      if (f.path == "model_" + std::to_string(i) + ".safetensors") return &f;
    return nullptr;
  };
  if (model >= 0)
    if (const ManifestFile* f = find(model)) return *f;
  int models = 0;
  while (find(models)) ++models;
  fail(Errc::invalid_argument,
       "'" + dir + "' holds " + std::to_string(models) + " model" + (models == 1 ? "" : "s") +
           " (model_0.safetensors onwards); there is no model " + std::to_string(model));
}

// Reads exactly n bytes (or fails naming the file).
void read_exact(int fd, char* buf, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(Errc::io, sys_error("cannot read '" + path + "'", errno));
    if (r == 0) fail(Errc::io, "'" + path + "' ended early");
    got += static_cast<size_t>(r);
  }
}

void write_all(int fd, const char* buf, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(Errc::io, sys_error("cannot write '" + path + "'", errno));
    done += static_cast<size_t>(w);
  }
}

// Copies `src` (whose manifest entry is `want`) to `tmp`: its header checked first, its CRC-32
// compared at the end.
void checked_copy(const std::string& src, const ManifestFile& want, const std::string& tmp) {
  Fd in;
  in.fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) fail(Errc::io, sys_error("cannot open '" + src + "'", errno));
  std::vector<char> buf(size_t{1} << 20);
  uint64_t left = want.size;
  // The header: parse_header's checks against the listed size (length, JSON, offsets that fill
  // the data section exactly).
  uint64_t len = 0;
  if (left >= 8) {
    read_exact(in.fd, buf.data(), 8, src);
    for (int i = 7; i >= 0; --i) len = len << 8 | static_cast<uint8_t>(buf[static_cast<size_t>(i)]);
  }
  std::string head(buf.data(), left >= 8 ? 8 : 0);
  if (left >= 8 && len <= left - 8 && len <= (uint64_t{100} << 20)) {
    head.resize(static_cast<size_t>(8 + len));
    read_exact(in.fd, head.data() + 8, static_cast<size_t>(len), src);
  }
  parse_header(reinterpret_cast<const uint8_t*>(head.data()), head.size(), want.size, src);
  Fd out;
  out.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out.fd < 0) fail(Errc::io, sys_error("cannot create '" + tmp + "'", errno));
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(head.data()), static_cast<uInt>(head.size()));
  write_all(out.fd, head.data(), head.size(), tmp);
  left -= head.size();
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    read_exact(in.fd, buf.data(), n, src);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    write_all(out.fd, buf.data(), n, tmp);
    left -= n;
  }
  char extra;
  if (::read(in.fd, &extra, 1) != 0)
    fail(Errc::io, "'" + src + "' changed while it was copied (it grew)");
  if (static_cast<uint32_t>(crc) != want.crc32)
    fail(Errc::io, "'" + src + "' does not match its checksum in manifest.json (corrupt)");
  if (::fsync(out.fd) != 0) fail(Errc::io, sys_error("cannot sync '" + tmp + "'", errno));
}

}  // namespace

std::string merged_path(const std::string& out) {
  if (ends_with(out, ".safetensors")) return out;
  return out + (ends_with(out, "/") ? "" : "/") + "model.safetensors";
}

std::string merge_weights(const std::string& dir, const std::string& out, int model) {
  const Manifest m = read_manifest(dir);
  check_listed_files(dir, m);
  const ManifestFile& entry = model_entry(dir, m, model);
  const std::string target = merged_path(out);
  const std::string parent =
      target.find('/') == std::string::npos ? "." : target.substr(0, target.rfind('/'));
  if (!ends_with(out, ".safetensors") && !parent.empty()) make_directories(parent, 0777);
  const std::string tmp = target + ".partial-" + std::to_string(::getpid());
  try {
    checked_copy(dir + "/" + entry.path, entry, tmp);
    if (std::rename(tmp.c_str(), target.c_str()) != 0)
      fail(Errc::io, sys_error("cannot rename '" + tmp + "' to '" + target + "'", errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  return target;
}

}  // namespace accel::checkpoint
