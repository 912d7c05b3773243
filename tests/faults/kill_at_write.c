/*
 * kill_at_write.c - an LD_PRELOAD library for the fault suite (faults_trackers.py): the process
 * kills itself with SIGKILL inside its N-th write(2) to a file whose name starts with one of the
 * given prefixes, after letting a given fraction of that write's bytes reach the file, so that a
 * kill lands at a chosen write of a chosen file and tears it where the driver says.
 *
 *   KILL_AT_WRITE_MATCH     comma-separated prefixes of the files' base names
 *   KILL_AT_WRITE_N         which matching write (1-based) the kill lands in
 *   KILL_AT_WRITE_KEEP      fraction (0 to 1) of that write's bytes written before the kill
 *   KILL_AT_WRITE_RANK      only in the process whose RANK is this (unset: any process)
 *   KILL_AT_WRITE_REPORT    a file that must not exist yet: created at the kill with one line,
 *                           "<base name> <n> <kept> <size>"; while it exists nothing is killed
 *                           (a restarted attempt of the same job runs on)
 *
 * Without KILL_AT_WRITE_MATCH the library only passes writes through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void*, size_t);

static write_fn real_write(void) {
  static write_fn fn = NULL;
  if (!fn) fn = (write_fn)dlsym(RTLD_NEXT, "write");
  return fn;
}

/* The base name of the file behind `fd` when it matches a prefix of KILL_AT_WRITE_MATCH. */
static int matches(int fd, const char* match, char* base, size_t base_size) {
  char link[64], path[4096];
  const char *slash, *p;
  ssize_t n;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = 0;
  slash = strrchr(path, '/');
  snprintf(base, base_size, "%s", slash ? slash + 1 : path);
  for (p = match; *p;) {
    const char* end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0 && strncmp(base, p, len) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* Exported whatever the build's default visibility. */
__attribute__((visibility("default"))) ssize_t write(int fd, const void* buf, size_t size) {
  static long seen = 0;
  const char* match = getenv("KILL_AT_WRITE_MATCH");
  const char* rank = getenv("KILL_AT_WRITE_RANK");
  const char* report = getenv("KILL_AT_WRITE_REPORT");
  char base[1024];
  if (match && *match && (!rank || (getenv("RANK") && strcmp(getenv("RANK"), rank) == 0)) &&
      report && access(report, F_OK) != 0 && matches(fd, match, base, sizeof base) &&
      ++seen == atol(getenv("KILL_AT_WRITE_N") ? getenv("KILL_AT_WRITE_N") : "0")) {
    const char* keep_text = getenv("KILL_AT_WRITE_KEEP");
    double keep = keep_text ? atof(keep_text) : 0.5;
    size_t kept = (size_t)((keep < 0 ? 0 : keep > 1 ? 1 : keep) * (double)size);
    char line[1200];
    int out;
    if (kept > 0) kept = (size_t)real_write()(fd, buf, kept);
    out = open(report, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out >= 0) {
      const int len = snprintf(line, sizeof line, "%s %ld %zu %zu\n", base, seen, kept, size);
      real_write()(out, line, (size_t)len);
      close(out);
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
  }
  return real_write()(fd, buf, size);
}
