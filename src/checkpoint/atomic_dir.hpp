// A directory that appears complete or not at all: written under a temporary name beside its final
// place, fsynced, and renamed into place by commit(). A crash at any point before the rename leaves
// the previous checkpoint of that name untouched. The partial directory is owner-only (0700); the
// committed one has 0777 less the process's umask, as any directory the user makes. POSIX only, no
// LibTorch.
#pragma once

#include <string>

namespace accel::checkpoint {

class AtomicDir {
 public:
  // Creates `final_path` + `suffix` (".partial-<pid>" by default; its parent must exist). Throws
  // accel::Error(io).
  explicit AtomicDir(std::string final_path, std::string suffix = "");
  // Removes the partial directory unless commit() succeeded.
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  // Where to write the files.
  const std::string& path() const { return partial_; }
  // fsyncs every file and the directory, then puts it in place of `final_path` (an existing one is
  // swapped out atomically, renameat2 RENAME_EXCHANGE, and removed after), and fsyncs the parent.
  // Throws accel::Error(io).
  void commit();

 private:
  std::string final_;
  std::string partial_;
  bool committed_ = false;
};

// Removes a directory tree; errors are ignored (best effort).
void remove_tree(const std::string& path);

}  // namespace accel::checkpoint
