/* The public header must be plain, self-contained C99: this file is compiled with
 * -std=c99 -Wall -Wextra -pedantic -Werror, and run to check the version macros. */
#include "accel/accel.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR,
           ACCEL_VERSION_PATCH);
  if (strcmp(expected, accel_version()) != 0) {
    fprintf(stderr, "header %s, library %s\n", expected, accel_version());
    return 1;
  }
  if (accel_version_number() != (uint32_t)ACCEL_VERSION_NUMBER) {
    fprintf(stderr, "header %d, library number %u\n", ACCEL_VERSION_NUMBER,
            (unsigned)accel_version_number());
    return 1;
  }
  return ACCEL_VERSION_CHECK(ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH) ? 0 : 1;
}
