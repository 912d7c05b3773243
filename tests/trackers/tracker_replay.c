/*
 * tracker_replay.c - drives libaccel's trackers for the tests in this directory.
 *
 *   tracker_replay SCRIPT           replays SCRIPT's calls, one a line, fields split by tabs:
 *                                     config KEY n|t VALUE        adds to init's configuration
 *                                     init PROJECT                accel_init_trackers
 *                                     log STEP KEY n|t VALUE ...  accel_log (STEP -1: none)
 *                                     end                         accel_end_training
 *   tracker_replay --forever PROJECT  init, then logs loss and lr at steps 0, 1, ... until
 *                                     killed, printing "logged N" once step N's accel_log returned
 *
 * Numbers are parsed by strtod ("nan", "inf", "-inf" included). Every process runs every call:
 * libaccel decides that only the main process writes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <accel/accel.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    accel_status st_ = (call);                                                              \
    if (st_ != ACCEL_OK) {                                                                  \
      fprintf(stderr, "tracker_replay: %s failed: %s: %s\n", #call, accel_status_name(st_), \
              accel_last_error_message());                                                  \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define MAX_FIELDS 64

static void die(const char* what, int line) {
  fprintf(stderr, "tracker_replay: line %d: %s\n", line, what);
  exit(2);
}

/* Splits `s` in place at tabs (empty fields kept, unlike strtok); returns the count. */
static int split_tabs(char* s, char** fields, int line) {
  int n = 0;
  for (;;) {
    char* tab = strchr(s, '\t');
    if (n == MAX_FIELDS) die("too many fields", line);
    fields[n++] = s;
    if (!tab) return n;
    *tab = '\0';
    s = tab + 1;
  }
}

static double parse_number(const char* text, int line) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (end == text || *end) die("not a number", line);
  return v;
}

static int64_t parse_step(const char* text, int line) {
  char* end = NULL;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end) die("not a step", line);
  return (int64_t)v;
}

/* Sets KEY n|t VALUE triples from `fields` into `values`. */
static void set_values(accel_values* values, char** fields, int count, int line) {
  int i;
  if (count % 3) die("values come as KEY n|t VALUE", line);
  for (i = 0; i < count; i += 3) {
    if (!strcmp(fields[i + 1], "n"))
      CHECK(accel_values_set_number(values, fields[i], parse_number(fields[i + 2], line)));
    else if (!strcmp(fields[i + 1], "t"))
      CHECK(accel_values_set_text(values, fields[i], fields[i + 2]));
    else
      die("a value's kind is n or t", line);
  }
}

static int replay(accel_accelerator* acc, const char* path) {
  static char buf[1 << 16];
  char* fields[MAX_FIELDS];
  accel_values* config = NULL;
  int line = 0;
  FILE* in = fopen(path, "r");
  if (!in) {
    perror(path);
    return 2;
  }
  CHECK(accel_values_new(&config));
  while (fgets(buf, sizeof buf, in)) {
    size_t len = strlen(buf);
    int n;
    ++line;
    if (!len || buf[len - 1] != '\n') die("line too long or not ended", line);
    buf[len - 1] = '\0';
    n = split_tabs(buf, fields, line);
    if (!strcmp(fields[0], "config")) {
      set_values(config, fields + 1, n - 1, line);
    } else if (!strcmp(fields[0], "init") && n == 2) {
      size_t keys = 0;
      CHECK(accel_values_count(config, &keys));
      CHECK(accel_init_trackers(acc, fields[1], keys ? config : NULL));
    } else if (!strcmp(fields[0], "log") && n >= 2) {
      accel_values* values = NULL;
      CHECK(accel_values_new(&values));
      set_values(values, fields + 2, n - 2, line);
      CHECK(accel_log(acc, values, parse_step(fields[1], line)));
      accel_values_free(values);
    } else if (!strcmp(fields[0], "end") && n == 1) {
      CHECK(accel_end_training(acc));
    } else {
      die("unknown call", line);
    }
  }
  accel_values_free(config);
  if (ferror(in)) die("read error", line);
  fclose(in);
  return 0;
}

static int forever(accel_accelerator* acc, const char* project) {
  accel_values* values = NULL;
  int64_t step;
  CHECK(accel_init_trackers(acc, project, NULL));
  CHECK(accel_values_new(&values));
  for (step = 0;; ++step) {
    CHECK(accel_values_set_number(values, "loss", 1.0 / (double)(step + 1)));
    CHECK(accel_values_set_number(values, "lr", 1e-3 * (double)(step % 7)));
    CHECK(accel_log(acc, values, step));
    /* Printed only after accel_log returned: the harness's promise is what it reads here. */
    printf("logged %lld\n", (long long)step);
    fflush(stdout);
  }
}

int main(int argc, char** argv) {
  accel_config* cfg = NULL;
  accel_accelerator* acc = NULL;
  int rc;
  if (argc != 2 && !(argc == 3 && !strcmp(argv[1], "--forever"))) {
    fprintf(stderr, "usage: tracker_replay SCRIPT | tracker_replay --forever PROJECT\n");
    return 2;
  }
  /* log_with and the directories come from the environment (ACCEL_LOG_WITH, ...). */
  CHECK(accel_config_new(&cfg));
  CHECK(accel_init(cfg, &acc));
  accel_config_free(cfg);
  rc = argc == 3 ? forever(acc, argv[2]) : replay(acc, argv[1]);
  accel_accelerator_free(acc);
  return rc;
}
