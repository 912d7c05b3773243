/* Preloaded into `accel launch` by mp_test: fork() fails with EAGAIN from the FAIL_FORK_AT-th
 * call on (counting from 1), so that the launcher's handling of a rank it cannot start is tested
 * for real. Without FAIL_FORK_AT it is the real fork(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* Exported even though the project builds with hidden visibility: it must interpose libc's. */
__attribute__((visibility("default"))) pid_t fork(void) {
  static int calls = 0;
  static pid_t (*real_fork)(void) = NULL;
  const char* at = getenv("FAIL_FORK_AT");
  if (at && ++calls >= atoi(at)) {
    errno = EAGAIN;
    return -1;
  }
  if (!real_fork) real_fork = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
  return real_fork();
}
