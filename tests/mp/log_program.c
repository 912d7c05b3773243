/* The logger on real processes, for MultiProcess.Logger* in mp_test.cpp:
 *   log_program
 * Each rank logs a main-process-only message, a message of every process, three rounds in rank
 * order (later ranks are made to arrive first, so only the ordering puts rank 0 first) and a debug
 * message below the default level. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "accel/accel.h"

#define CHECK(call)                                                         \
  do {                                                                      \
    accel_status st_ = (call);                                              \
    if (st_ != ACCEL_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                  \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int main(void) {
  accel_accelerator* acc = NULL;
  int32_t rank = 0, world = 0;
  int round;
  CHECK(accel_init(NULL, &acc));
  CHECK(accel_process_index(acc, &rank));
  CHECK(accel_num_processes(acc, &world));
  CHECK(accel_log_message(acc, ACCEL_LOG_INFO, 0, "once per job"));
  CHECK(accel_log_message(acc, ACCEL_LOG_WARNING, ACCEL_LOG_ALL_PROCESSES, "every rank"));
  for (round = 0; round < 3; ++round) {
    char line[64];
    struct timespec later = {0, (long)(world - 1 - rank) * 40000000L};
    nanosleep(&later, NULL);
    snprintf(line, sizeof line, "round %d", round);
    CHECK(
        accel_log_message(acc, ACCEL_LOG_INFO, ACCEL_LOG_ALL_PROCESSES | ACCEL_LOG_IN_ORDER, line));
  }
  CHECK(accel_log_message(acc, ACCEL_LOG_DEBUG, ACCEL_LOG_ALL_PROCESSES, "hidden below info"));
  accel_accelerator_free(acc);
  return 0;
}
