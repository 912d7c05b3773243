#include "checkpoint/tensor_reader.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "checkpoint/model_io.hpp"
#include "common/error.hpp"

namespace accel::checkpoint {

namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // parse_header's limit: nothing longer is read

// The header bytes of an open file of `size` bytes: its length prefix and as much of the JSON as
// the length says, when that is within the file and the limit (parse_header refuses it otherwise).
std::string header_bytes(int fd, uint64_t size, const std::string& path) {
  std::string bytes(static_cast<size_t>(std::min<uint64_t>(size, 8)), '\0');
  auto read_at = [&](size_t from) {
    size_t got = from;
    while (got < bytes.size()) {
      const ssize_t n =
          ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(Errc::io, sys_error("cannot read '" + path + "'", errno));
      if (n == 0) fail(Errc::io, "cannot read '" + path + "': it ended early");
      got += static_cast<size_t>(n);
    }
  };
  read_at(0);
  if (bytes.size() == 8) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = len << 8 | static_cast<uint8_t>(bytes[i]);
    if (len <= size - 8 && len <= kMaxHeader) {
      bytes.resize(static_cast<size_t>(8 + len));
      read_at(8);
    }
  }
  return bytes;
}

bool direct(const at::Tensor& dst, at::ScalarType stored) {
  return dst.device().is_cpu() && dst.scalar_type() == stored && dst.is_contiguous() &&
         dst.layout() == at::kStrided && !dst.is_quantized();
}

}  // namespace

TensorReader::TensorReader(const std::vector<std::string>& files) {
  try {
    for (const auto& path : files) {
      File f;
      f.path = path;
      f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (f.fd < 0) fail(Errc::io, sys_error("cannot read '" + path + "'", errno));
      files_.push_back(f);  // closed by the destructor from here on
      struct stat st;
      if (::fstat(f.fd, &st) != 0) fail(Errc::io, sys_error("cannot stat '" + path + "'", errno));
      const auto size = static_cast<uint64_t>(st.st_size);
      const std::string head = header_bytes(f.fd, size, path);
      files_.back().header =
          parse_header(reinterpret_cast<const uint8_t*>(head.data()), head.size(), size, path);
      const size_t index = files_.size() - 1;
      const auto& tensors = files_.back().header.tensors;
      for (size_t e = 0; e < tensors.size(); ++e) {
        (void)torch_dtype(tensors[e].dtype, path);  // refused here, before anything is read
        where_[tensors[e].name] = {index, e};
      }
    }
  } catch (...) {
    for (const auto& f : files_) ::close(f.fd);
    throw;
  }
}

TensorReader::~TensorReader() {
  for (const auto& f : files_) ::close(f.fd);
}

std::vector<TensorSpec> TensorReader::specs() const {
  std::vector<TensorSpec> out;
  for (const auto& [name, w] : where_) {
    const TensorEntry& e = files_[w.file].header.tensors[w.entry];
    out.push_back({name, e.shape, e.dtype});
  }
  return out;
}

std::vector<std::string> TensorReader::names_in_data_order() const {
  std::vector<std::string> out;
  for (size_t f = 0; f < files_.size(); ++f)
    for (size_t e = 0; e < files_[f].header.tensors.size(); ++e) {
      const auto& name = files_[f].header.tensors[e].name;
      const Where& w = where_.at(name);
      if (w.file == f && w.entry == e) out.push_back(name);  // a later file's wins
    }
  return out;
}

void TensorReader::pread_all(const File& f, void* out, uint64_t bytes, uint64_t offset,
                             const std::string& tensor) {
  auto* p = static_cast<char*>(out);
  uint64_t got = 0;
  while (got < bytes) {
    // At most 1 GiB per call: Linux reads no more than ~2 GiB at once anyway.
    const size_t ask = static_cast<size_t>(std::min<uint64_t>(bytes - got, uint64_t{1} << 30));
    const ssize_t n = ::pread(f.fd, p + got, ask, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(Errc::io,
           n < 0 ? sys_error("cannot read tensor '" + tensor + "' of '" + f.path + "'", errno)
                 : "cannot read tensor '" + tensor + "' of '" + f.path +
                       "': the file ended early (it changed after its header was "
                       "checked)");
    got += static_cast<uint64_t>(n);
    bytes_read_ += static_cast<uint64_t>(n);
  }
}

void TensorReader::read_into(const std::string& name, const at::Tensor& dst) {
  const Where& w = where_.at(name);
  const File& f = files_[w.file];
  const TensorEntry& e = f.header.tensors[w.entry];
  const at::ScalarType stored = torch_dtype(e.dtype, f.path);
  if (dst.sizes().vec() != e.shape)
    fail(Errc::internal, "tensor '" + name + "' read into a tensor of another shape");
  const uint64_t offset = f.header.data_start + e.begin, bytes = e.end - e.begin;
  c10::NoGradGuard no_grad;
  if (direct(dst, stored)) {
    pread_all(f, dst.data_ptr(), bytes, offset, name);
    return;
  }
  at::Tensor buffer = at::empty(e.shape, at::TensorOptions().dtype(stored));
  pread_all(f, buffer.data_ptr(), bytes, offset, name);
  at::Tensor(dst).copy_(buffer);
}

at::Tensor TensorReader::read(const std::string& name) {
  const Where& w = where_.at(name);
  const TensorEntry& e = files_[w.file].header.tensors[w.entry];
  at::Tensor t =
      at::empty(e.shape, at::TensorOptions().dtype(torch_dtype(e.dtype, files_[w.file].path)));
  read_into(name, t);
  return t;
}

}  // namespace accel::checkpoint
