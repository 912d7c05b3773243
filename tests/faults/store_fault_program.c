/*
 * store_fault_program.c - the rank program of fault group j of the fault-injection suite
 * (tests/faults/faults_store.py): ranks whose every round is a fresh rendezvous through rank 0's
 * store, so that a driver can put misbehaving store clients next to the ranks' own store traffic
 * and time it. C99 on accel.h only; every line is flushed at once.
 *
 *   store_fault_program PORT...
 *       One rank of a job started from the environment alone (RANK, WORLD_SIZE, LOCAL_RANK,
 *       LOCAL_WORLD_SIZE, MASTER_ADDR, ACCEL_JOB_TOKEN set by the driver). One round per PORT:
 *         rank > 0 prints "r<r> wait <i>" and reads a line from stdin (the driver's go: rank 0's
 *           store of this round listens and the driver's clients are at it) before it joins;
 *         every rank: MASTER_PORT=PORT, accel_init (the census, Gloo's rendezvous and the
 *           shared-memory all-reduce's setup: every store request of the job), an accel_reduce
 *           (sum) of a small tensor, an accel_wait_for_everyone, and one line
 *             r<r> round <i> <t0> <t1> <t2> <t3> <sum>
 *           with CLOCK_MONOTONIC seconds before accel_init, after it, after the reduce and after
 *           the barrier, and the sum of the reduced elements;
 *         rank 0 then prints "r0 hold <i>" and reads a line from stdin before
 * accel_accelerator_free (which closes its store), so that the driver decides how long the store
 * lives. At the end: "r<r> checksum <16 hex digits>" (FNV-1a 64 of every reduced tensor's bytes)
 *       and "r<r> done". A failing call prints "r<r> error <STATUS_NAME> <status> <call>:
 *       <message>" on stderr and exits with 4 (ACCEL_ERR_PEER_FAILED, ACCEL_ERR_TIMEOUT or
 *       ACCEL_ERR_RENDEZVOUS) or 1; a closed stdin exits 3; a usage error 64.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"
#include "fault_lines.h"

#define kElems 8

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check(accel_status st, const char* what) {
  char msg[4096];
  size_t i;
  if (st == ACCEL_OK) return;
  snprintf(msg, sizeof msg, "%s", accel_last_error_message());
  for (i = 0; msg[i]; ++i)
    if (msg[i] == '\n' || msg[i] == '\r') msg[i] = ' ';
  fprintf(stderr, "r%d error %s %d %s: %s\n", g_rank, accel_status_name(st), (int)st, what, msg);
  fflush(stderr);
  exit(st == ACCEL_ERR_PEER_FAILED || st == ACCEL_ERR_TIMEOUT || st == ACCEL_ERR_RENDEZVOUS ? 4
                                                                                            : 1);
}

/* Waits for the driver's line on stdin; exits 3 when stdin is closed. */
static void await_driver(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) {
    fprintf(stderr, "r%d error stdin closed\n", g_rank);
    exit(3);
  }
}

static uint64_t fnv(uint64_t h, const void* data, size_t size) {
  const unsigned char* p = (const unsigned char*)data;
  size_t i;
  for (i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

int main(int argc, char** argv) {
  const char* rank_env = getenv("RANK");
  uint64_t sum = 14695981039346656037ull;
  int i, k;
  if (argc < 2) {
    fprintf(stderr, "usage: store_fault_program PORT...\n");
    return 64;
  }
  g_rank = rank_env ? atoi(rank_env) : 0;
  for (i = 0; i + 1 < argc; ++i) {
    accel_accelerator* acc = NULL;
    accel_tensor *t = NULL, *out = NULL;
    float v[kElems], r[kElems];
    int64_t shape[1] = {kElems};
    size_t got = 0;
    double t0, t1, t2, t3, total = 0;
    int32_t idx = 0;
    if (g_rank != 0) {
      say("wait %d", i);
      await_driver();
    }
    if (setenv("MASTER_PORT", argv[i + 1], 1) != 0) {
      fprintf(stderr, "r%d error setenv\n", g_rank);
      return 1;
    }
    t0 = now();
    check(accel_init(NULL, &acc), "accel_init");
    t1 = now();
    check(accel_process_index(acc, &idx), "accel_process_index");
    g_rank = idx;
    for (k = 0; k < kElems; ++k) v[k] = (float)((g_rank + 1) * (i + 1) + k);
    check(accel_tensor_from_data(v, sizeof v, ACCEL_DTYPE_F32, shape, 1, &t),
          "accel_tensor_from_data");
    check(accel_reduce(acc, t, ACCEL_REDUCE_SUM, &out), "accel_reduce");
    check(accel_tensor_to_data(out, r, sizeof r, &got), "accel_tensor_to_data");
    t2 = now();
    check(accel_wait_for_everyone(acc), "accel_wait_for_everyone");
    t3 = now();
    sum = fnv(sum, r, sizeof r);
    for (k = 0; k < kElems; ++k) total += r[k];
    say("round %d %.6f %.6f %.6f %.6f %.1f", i, t0, t1, t2, t3, total);
    accel_tensor_free(t);
    accel_tensor_free(out);
    if (g_rank == 0) {
      say("hold %d", i);
      await_driver();
    }
    accel_accelerator_free(acc);
  }
  say("checksum %016llx", (unsigned long long)sum);
  say("done");
  return 0;
}
