#include "data/idx_file.hpp"

#include <zlib.h>

#include <algorithm>

#include "common/error.hpp"

namespace accel::data {

namespace {

// gzread opens plain files as they are, too.
struct GzFile {
  explicit GzFile(const std::string& path) : f(gzopen(path.c_str(), "rb")) {
    if (!f) fail(Errc::io, "cannot open IDX file '" + path + "'");
    gzbuffer(f, 1 << 17);
  }
  ~GzFile() { gzclose(f); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile f;
};

// Reads exactly `n` bytes or reports how many there were.
size_t read_fully(gzFile f, void* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, static_cast<char*>(out) + done, chunk);
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// A short read: corrupt compressed data (said so, with how far it got), or a file that ends early.
[[noreturn]] void short_read(gzFile f, const std::string& path, const std::string& ends_early,
                             const std::string& how_far = "") {
  int zerr = Z_OK;
  const char* zmessage = gzerror(f, &zerr);
  if (zerr == Z_DATA_ERROR)
    fail(Errc::io, "IDX file '" + path + "' is corrupt: its compressed data stops making sense (" +
                       zmessage + ")" + how_far);
  fail(Errc::io, ends_early);
}

size_t type_width(uint8_t code) {
  switch (code) {
    case 0x08:
    case 0x09:
      return 1;
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
  }
  return 0;
}

IdxLayout read_header(gzFile f, const std::string& path) {
  unsigned char magic[4];
  if (read_fully(f, magic, 4) != 4)
    short_read(f, path, "IDX file '" + path + "' is too short to hold a header");
  IdxLayout layout;
  layout.type_code = magic[2];
  layout.width = type_width(magic[2]);
  if (magic[0] != 0 || magic[1] != 0 || layout.width == 0 || magic[3] == 0)
    fail(Errc::io, "'" + path + "' is not an IDX file: its magic number is " +
                       std::to_string(magic[0]) + " " + std::to_string(magic[1]) + " " +
                       std::to_string(magic[2]) + " " + std::to_string(magic[3]) +
                       " (expected 0 0 <type 8,9,11,12,13,14> <dimensions>)");
  layout.shape.resize(magic[3]);
  size_t count = 1;
  for (auto& d : layout.shape) {
    unsigned char b[4];
    if (read_fully(f, b, 4) != 4)
      short_read(f, path, "IDX file '" + path + "' is truncated in its header");
    d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    if (d > 0 && count > (size_t{1} << 40) / static_cast<size_t>(d))
      fail(Errc::io, "IDX file '" + path + "' declares an implausibly large shape");
    count *= static_cast<size_t>(d);
  }
  layout.header_bytes = 4 + 4 * layout.shape.size();
  layout.data_bytes = count * layout.width;
  layout.compressed = gzdirect(f) == 0;
  return layout;
}

}  // namespace

IdxLayout read_idx_layout(const std::string& path) {
  GzFile file(path);
  return read_header(file.f, path);
}

void decode_idx(const std::string& path, const IdxLayout& layout, const ByteSink& sink) {
  GzFile file(path);
  read_header(file.f, path);  // the same bytes read_idx_layout saw, skipped
  const size_t chunk = (size_t{1} << 20) / layout.width * layout.width;
  std::vector<unsigned char> buffer(std::min(chunk, layout.data_bytes));
  for (size_t done = 0; done < layout.data_bytes;) {
    const size_t want = std::min(chunk, layout.data_bytes - done);
    const size_t got = read_fully(file.f, buffer.data(), want);
    if (got != want)
      short_read(file.f, path,
                 "IDX file '" + path + "' is truncated: its header promises " +
                     std::to_string(layout.data_bytes) + " bytes of data, it holds " +
                     std::to_string(done + got),
                 " after " + std::to_string(done + got) + " of " +
                     std::to_string(layout.data_bytes) + " bytes");
    if (layout.width > 1)  // IDX stores big-endian values
      for (size_t i = 0; i < want; i += layout.width)
        std::reverse(buffer.data() + i, buffer.data() + i + layout.width);
    sink(buffer.data(), want);
    done += want;
  }
}

}  // namespace accel::data
