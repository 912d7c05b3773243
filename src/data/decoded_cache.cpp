#include "data/decoded_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "common/files.hpp"
#include "security/sha256.hpp"

namespace accel::data {

namespace {

// Bumped when the layout of a copy changes, so that old copies are never read as new ones.
constexpr char kFormat[] = "libaccel decoded copy 1";

struct Fd {
  explicit Fd(int fd = -1) : fd(fd) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int fd;
};

std::string hex16(const std::string& text) {
  const auto d = security::sha256(text);
  return security::to_hex(d.data(), 8);
}

// "<path digest>-<version digest>.decoded": the path's part finds the older versions to remove.
struct CopyName {
  std::string path_part, file, lock;
};

bool copy_name(const std::string& source, size_t bytes, CopyName* out, std::string* why) {
  struct stat st {};
  char real[PATH_MAX];
  if (stat(source.c_str(), &st) != 0 || !realpath(source.c_str(), real)) {
    *why = sys_error("cannot identify " + source, errno);
    return false;
  }
  out->path_part = hex16(real);
  const std::string version = std::string(kFormat) + "\n" + real + "\n" +
                              std::to_string(st.st_dev) + " " + std::to_string(st.st_ino) + " " +
                              std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) +
                              "." + std::to_string(st.st_mtim.tv_nsec) + " " +
                              std::to_string(bytes);
  out->file = out->path_part + "-" + hex16(version) + ".decoded";
  out->lock = out->path_part + ".lock";
  return true;
}

// Makes `dir` and its missing parents (0700) and opens it; it must be this user's and writable by
// no one else, since what is read from it goes into training.
int open_cache_dir(const std::string& dir, std::string* why) {
  try {
    make_directories(dir, 0700);
  } catch (const Error& e) {
    *why = e.what();
    return -1;
  }
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    *why = sys_error("cannot open " + dir, errno);
    if (fd >= 0) close(fd);
    return -1;
  }
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    *why = dir + " belongs to another user or others may write to it";
    close(fd);
    return -1;
  }
  return fd;
}

DecodedCopy keep_open(Fd* fd, size_t bytes) {
  DecodedCopy c;
  c.fd = std::shared_ptr<const int>(new int(fd->fd), [](const int* p) {
    close(*p);
    delete p;
  });
  fd->fd = -1;
  c.bytes = bytes;
  return c;
}

// The complete copy `name`, when there is one: a regular file of this user's of exactly `bytes`.
std::optional<DecodedCopy> open_copy(int dir, const std::string& name, size_t bytes) {
  Fd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (fd.fd < 0 || fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<size_t>(st.st_size) != bytes)
    return std::nullopt;
  return keep_open(&fd, bytes);
}

// Holds the source's lock (flock: released by the kernel when its holder dies), polling so that a
// holder that never finishes is given up on after `wait`.
bool lock_source(int dir, const std::string& lock, std::chrono::milliseconds wait, Fd* held,
                 std::string* why) {
  held->fd = openat(dir, lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (held->fd < 0) {
    *why = sys_error("cannot open the lock " + lock, errno);
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (flock(held->fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      *why = sys_error("cannot lock " + lock, errno);
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *why = "another process has been decoding the same file for longer than " +
             std::to_string(wait.count()) + " ms";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Removes what the lock's earlier holders left under this source's name: older versions (their
// mappings stay valid: a file is only ever unlinked, never cut) and partial copies of the dead.
void remove_others(int dir, const CopyName& name) {
  DIR* listing = fdopendir(dup(dir));
  if (!listing) return;
  while (const dirent* e = readdir(listing)) {
    const std::string entry = e->d_name;
    if (entry.rfind(name.path_part + "-", 0) == 0 && entry != name.file)
      unlinkat(dir, entry.c_str(), 0);
  }
  closedir(listing);
}

// A file for the new copy: unnamed (O_TMPFILE) where the file system allows, else named
// "<file>.partial" (only the lock's holder writes it; a dead holder's is removed by the next).
int new_copy(int dir, const CopyName& name, std::string* partial) {
  int fd = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  *partial = name.file + ".partial";
  unlinkat(dir, partial->c_str(), 0);
  return openat(dir, partial->c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

bool give_name(int dir, int fd, const std::string& partial, const std::string& file) {
  if (!partial.empty()) return renameat(dir, partial.c_str(), dir, file.c_str()) == 0;
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  return linkat(AT_FDCWD, self.c_str(), dir, file.c_str(), AT_SYMLINK_FOLLOW) == 0;
}

// Decodes into a new file and names it. A failure of `decode` leaves nothing and is rethrown.
std::optional<DecodedCopy> make_copy(int dir, const CopyName& name, size_t bytes,
                                     const std::function<void(const ByteSink&)>& decode,
                                     std::string* why) {
  std::string partial;
  Fd fd(new_copy(dir, name, &partial));
  auto drop_partial = [&] {
    if (!partial.empty()) unlinkat(dir, partial.c_str(), 0);
  };
  if (fd.fd < 0) {
    *why = sys_error("cannot make a file in the cache", errno);
    return std::nullopt;
  }
  // Reserved first: a full disk is a reason to decode privately, found before decoding.
  if (const int err = posix_fallocate(fd.fd, 0, static_cast<off_t>(bytes)); err != 0) {
    errno = err;
    *why = sys_error("cannot reserve " + std::to_string(bytes >> 20) + " MiB in the cache", errno);
    drop_partial();
    return std::nullopt;
  }
  // Written, not mapped: the decoding process keeps none of the copy in its resident set. A write
  // that fails is the cache's failure (the caller decodes privately); what `decode` throws is the
  // source's and goes to the caller.
  struct WriteFailed {
    std::string why;
  };
  size_t written = 0;
  try {
    decode([&](const unsigned char* data, size_t size) {
      if (written + size > bytes) throw WriteFailed{"the decoder gave more bytes than expected"};
      for (size_t done = 0; done < size;) {
        const ssize_t n = pwrite(fd.fd, data + done, size - done, static_cast<off_t>(written));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw WriteFailed{sys_error("cannot write the copy", errno)};
        done += static_cast<size_t>(n);
        written += static_cast<size_t>(n);
      }
    });
    if (written != bytes) throw WriteFailed{"the decoder gave fewer bytes than expected"};
  } catch (const WriteFailed& e) {
    *why = e.why;
    drop_partial();
    return std::nullopt;
  } catch (...) {
    drop_partial();
    throw;
  }
  // On disk before it has a name, so that a crash of the machine cannot leave a named copy with
  // holes in it.
  if (fdatasync(fd.fd) != 0 || !give_name(dir, fd.fd, partial, name.file)) {
    *why = sys_error("cannot keep the copy", errno);  // the data is still good for this process
    drop_partial();
  }
  return keep_open(&fd, bytes);
}

}  // namespace

std::string decoded_cache_dir(const std::function<const char*(const char*)>& getenv) {
  const char* chosen = getenv("ACCEL_DATASETS_CACHE");
  if (chosen && *chosen) return std::string(chosen) == "off" ? std::string() : chosen;
  const char* xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/libaccel/datasets";
  const char* home = getenv("HOME");
  if (home && *home == '/') return std::string(home) + "/.cache/libaccel/datasets";
  return {};
}

void read_copy(const DecodedCopy& copy, size_t offset, size_t size, void* out) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = pread(*copy.fd, p, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail(Errc::io, got < 0 ? sys_error("reading a decoded copy", errno)
                             : "a decoded copy ended early (cut while in use?)");
    p += got;
    offset += static_cast<size_t>(got);
    size -= static_cast<size_t>(got);
  }
}

std::optional<DecodedCopy> open_decoded(const std::string& dir, const std::string& source,
                                        size_t bytes,
                                        const std::function<void(const ByteSink&)>& decode,
                                        std::string* why, std::chrono::milliseconds wait) {
  CopyName name;
  if (dir.empty()) {
    *why = "no cache directory (ACCEL_DATASETS_CACHE=off, or no HOME)";
    return std::nullopt;
  }
  if (bytes == 0 || !copy_name(source, bytes, &name, why)) return std::nullopt;
  const Fd cache(open_cache_dir(dir, why));
  if (cache.fd < 0) return std::nullopt;
  if (auto c = open_copy(cache.fd, name.file, bytes)) return c;
  Fd lock;
  if (!lock_source(cache.fd, name.lock, wait, &lock, why)) return std::nullopt;
  if (auto c = open_copy(cache.fd, name.file, bytes)) return c;  // made while this one waited
  unlinkat(cache.fd, name.file.c_str(), 0);  // a file under the name that is not a good copy
  auto made = make_copy(cache.fd, name, bytes, decode, why);
  if (made) remove_others(cache.fd, name);
  return made;
}

}  // namespace accel::data
