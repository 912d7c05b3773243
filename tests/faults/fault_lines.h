/*
 * fault_lines.h - the lines every rank program of the fault suite prints, as its drivers read
 * them: "r<rank> ..." on stdout, flushed at once (a driver reading a pipe knows how far a killed
 * rank got), and "r<rank> error <STATUS_NAME> <status> <call>: <message>" on stderr for a failed
 * call. Header-only: each program is one translation unit. C99 on accel.h only.
 */
#ifndef ACCEL_TESTS_FAULT_LINES_H
#define ACCEL_TESTS_FAULT_LINES_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "accel/accel.h"

static int g_rank = 0;

/* One flushed line, "r<rank> " first. */
static inline void say(const char* fmt, ...) {
  va_list ap;
  char line[8192];
  int n = snprintf(line, sizeof line, "r%d ", g_rank);
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  printf("%s\n", line);
  fflush(stdout);
}

/* The library's last message on one line. */
static inline void last_message(char* msg, size_t size) {
  size_t i;
  snprintf(msg, size, "%s", accel_last_error_message());
  for (i = 0; msg[i]; ++i)
    if (msg[i] == '\n' || msg[i] == '\r') msg[i] = ' ';
}

/* One line on stderr for a failed call: the status and the library's message. */
static inline void report(const char* what, accel_status st) {
  char msg[4096];
  last_message(msg, sizeof msg);
  fprintf(stderr, "r%d error %s %d %s: %s\n", g_rank, accel_status_name(st), (int)st, what, msg);
  fflush(stderr);
}

/* A failed call ends the rank: 4 when a peer failed or timed out, 1 otherwise. */
#define CHECK(call)                                                           \
  do {                                                                        \
    accel_status st_ = (call);                                                \
    if (st_ != ACCEL_OK) {                                                    \
      report(#call, st_);                                                     \
      exit(st_ == ACCEL_ERR_PEER_FAILED || st_ == ACCEL_ERR_TIMEOUT ? 4 : 1); \
    }                                                                         \
  } while (0)

#endif
