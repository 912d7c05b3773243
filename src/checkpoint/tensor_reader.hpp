// A checkpoint's safetensors files opened and checked before any tensor is read, then read one
// tensor at a time (pread at the tensor's offset) straight into the tensor it loads: the memory a
// load needs is the model plus one tensor, never a whole file.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "checkpoint/load_plan.hpp"
#include "checkpoint/safetensors.hpp"

namespace accel::checkpoint {

class TensorReader {
 public:
  // Opens every file and reads and checks its header alone (parse_header: its length, JSON,
  // dtypes, offsets, and that the data section is exactly the file's remaining bytes, which
  // catches a truncated file), and that each dtype has a LibTorch equivalent. A tensor named in
  // two files is the later file's (files in the order given). Throws accel::Error(io) naming the
  // file: one that cannot be opened (a missing shard) or fails a check. The files stay open until
  // the reader is destroyed, so what is read later is what was checked.
  explicit TensorReader(const std::vector<std::string>& files);
  ~TensorReader();
  TensorReader(const TensorReader&) = delete;
  TensorReader& operator=(const TensorReader&) = delete;

  // Every tensor's name, shape and dtype, in name order.
  std::vector<TensorSpec> specs() const;
  // The tensors' names in the files' data order (file by file), each once.
  std::vector<std::string> names_in_data_order() const;
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  // The bytes of tensor data read so far (headers not counted).
  uint64_t bytes_read() const { return bytes_read_; }

  // Reads tensor `name` into `dst`, whose shape must be the file's: straight into its bytes when
  // it is a contiguous CPU tensor of the file's dtype, otherwise into a buffer of this one tensor
  // then copied (and converted: fp16/bf16 <-> fp32) into place. Throws accel::Error(io) naming the
  // file and tensor when the read fails or comes back short (the file changed since it was
  // checked); `dst` may then hold part of the bytes.
  void read_into(const std::string& name, const at::Tensor& dst);
  // Tensor `name` as a new CPU tensor of the file's dtype.
  at::Tensor read(const std::string& name);

 private:
  struct File {
    std::string path;
    int fd = -1;
    Header header;
  };
  struct Where {
    size_t file;
    size_t entry;  // index into that file's header.tensors
  };
  void pread_all(const File& f, void* out, uint64_t bytes, uint64_t offset,
                 const std::string& tensor);

  std::vector<File> files_;
  std::map<std::string, Where> where_;
  uint64_t bytes_read_ = 0;
};

}  // namespace accel::checkpoint
