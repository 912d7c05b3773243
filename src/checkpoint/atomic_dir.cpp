#include "checkpoint/atomic_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace accel::checkpoint {

namespace {

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail(Errc::io, "cannot open '" + path + "' to sync it: " + std::strerror(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) fail(Errc::io, "fsync of '" + path + "' failed: " + std::strerror(err));
}

// Every file below `dir`, then `dir` itself.
void fsync_tree(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) fail(Errc::io, "cannot list '" + dir + "': " + std::strerror(errno));
  std::vector<std::pair<std::string, bool>> entries;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (lstat(path.c_str(), &st) == 0) entries.emplace_back(path, S_ISDIR(st.st_mode));
  }
  closedir(d);
  for (const auto& [path, is_dir] : entries) {
    if (is_dir)
      fsync_tree(path);
    else
      fsync_path(path, false);
  }
  fsync_path(dir, true);
}

}  // namespace

void remove_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = opendir(path.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      closedir(d);
      for (const auto& n : names) remove_tree(path + "/" + n);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

namespace {

// The process's umask, read without changing it (umask(2) would, for every thread at once).
mode_t current_umask() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Umask:", 0) == 0)
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  return 022;
}

}  // namespace

AtomicDir::AtomicDir(std::string final_path, std::string suffix) : final_(std::move(final_path)) {
  while (final_.size() > 1 && final_.back() == '/') final_.pop_back();
  partial_ = final_ + (suffix.empty() ? ".partial-" + std::to_string(getpid()) : suffix);
  remove_tree(partial_);  // left over by an earlier crash of this very process id
  // Owner-only while it is being written; commit() gives it the umask's permissions.
  if (mkdir(partial_.c_str(), 0700) != 0)
    fail(Errc::io, "cannot create '" + partial_ + "': " + std::strerror(errno));
}

AtomicDir::~AtomicDir() {
  if (!committed_) remove_tree(partial_);
}

void AtomicDir::commit() {
  chmod(partial_.c_str(), 0777 & ~current_umask());
  fsync_tree(partial_);
  struct stat st;
  if (stat(final_.c_str(), &st) == 0) {
    // Swap the new directory and the previous one in one step, so that at every instant `final_`
    // names a complete checkpoint; the previous one then sits at partial_ and is removed.
    if (renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) != 0)
      fail(Errc::io,
           "cannot put '" + partial_ + "' in place of '" + final_ + "': " + std::strerror(errno));
    committed_ = true;
    fsync_path(parent_of(final_), true);
    remove_tree(partial_);
    return;
  }
  if (rename(partial_.c_str(), final_.c_str()) != 0)
    fail(Errc::io, "cannot rename '" + partial_ + "' to '" + final_ + "': " + std::strerror(errno));
  committed_ = true;
  fsync_path(parent_of(final_), true);
}

}  // namespace accel::checkpoint
