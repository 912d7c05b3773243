#include "checkpoint/atomic_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

AtomicDir::AtomicDir(std::string final_path, std::string suffix) : final_(std::move(final_path)) {
  while (final_.size() > 1 && final_.back() == '/') final_.pop_back();
  partial_ = final_ + (suffix.empty() ? ".partial-" + std::to_string(getpid()) : suffix);
  remove_tree(partial_);  // left over by an earlier crash of this very process id
  if (mkdir(partial_.c_str(), 0755) != 0)
    fail(Errc::io, "cannot create '" + partial_ + "': " + std::strerror(errno));
}

AtomicDir::~AtomicDir() {
  if (!committed_) remove_tree(partial_);
}

void AtomicDir::commit() {
  fsync_tree(partial_);
  struct stat st;
  const bool replacing = stat(final_.c_str(), &st) == 0;
  const std::string old = final_ + ".old-" + std::to_string(getpid());
  if (replacing && rename(final_.c_str(), old.c_str()) != 0)
    fail(Errc::io, "cannot move the previous '" + final_ + "' aside: " + std::strerror(errno));
  if (rename(partial_.c_str(), final_.c_str()) != 0) {
    const int err = errno;
    if (replacing) rename(old.c_str(), final_.c_str());
    fail(Errc::io, "cannot rename '" + partial_ + "' to '" + final_ + "': " + std::strerror(err));
  }
  committed_ = true;
  fsync_path(parent_of(final_), true);
  if (replacing) remove_tree(old);
}

}  // namespace accel::checkpoint
