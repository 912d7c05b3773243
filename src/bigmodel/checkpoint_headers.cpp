#include "bigmodel/checkpoint_headers.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <set>

#include "checkpoint/checkpoint_files.hpp"
#include "common/error.hpp"
#include "common/files.hpp"

namespace accel::bigmodel {

namespace {

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // parse_header's limit

// The data bytes the header declares (its largest end offset), so that parse_header checks the
// header against them rather than against what the file holds; 0 when the JSON is not readable
// (parse_header then reports what is wrong with it).
uint64_t declared_data_size(const std::string& json) {
  uint64_t end = 0;
  try {
    const auto j = nlohmann::json::parse(json);
    if (!j.is_object()) return 0;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const auto& v = it.value();
      if (it.key() == "__metadata__" || !v.is_object() || !v.contains("data_offsets")) continue;
      const auto& off = v["data_offsets"];
      if (off.is_array() && off.size() == 2 && off[1].is_number_unsigned())
        end = std::max(end, off[1].get<uint64_t>());
    }
  } catch (const std::exception&) {
    return 0;
  }
  return end;
}

// Reads exactly `n` bytes at `offset`, or fewer where the file ends.
std::string read_at(int fd, uint64_t offset, uint64_t n, const std::string& path) {
  std::string out(static_cast<size_t>(n), '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(Errc::io, sys_error("cannot read '" + path + "'", errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace

checkpoint::Header read_header_only(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(Errc::io, sys_error("cannot open '" + path + "'", errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(Errc::io, sys_error("cannot stat '" + path + "'", errno));
  if (!S_ISREG(st.st_mode)) fail(Errc::io, "'" + path + "' is not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  std::string prefix = read_at(fd, 0, 8, path);
  uint64_t len = 0;
  for (size_t i = prefix.size(); i-- > 0;) len = len << 8 | static_cast<uint8_t>(prefix[i]);
  // A header past the file or over the limit: parse_header refuses it, with the file's size.
  if (prefix.size() < 8 || len > kMaxHeader || len > file_size - 8)
    return checkpoint::parse_header(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size(),
                                    file_size, path);
  prefix += read_at(fd, 8, len, path);
  const uint64_t declared = declared_data_size(prefix.substr(8));
  return checkpoint::parse_header(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size(),
                                  8 + len + declared, path);
}

std::vector<checkpoint::TensorEntry> checkpoint_tensors(const std::string& path) {
  std::vector<checkpoint::TensorEntry> all;
  std::set<std::string> seen;
  for (const auto& file : checkpoint::checkpoint_files(path)) {
    for (auto& t : read_header_only(file).tensors) {
      if (!seen.insert(t.name).second)
        fail(Errc::io,
             "tensor '" + t.name + "' is in two files of '" + path + "' (again in '" + file + "')");
      all.push_back(std::move(t));
    }
  }
  return all;
}

}  // namespace accel::bigmodel
