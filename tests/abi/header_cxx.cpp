// The public header compiled as C++ (-Wall -Wextra -pedantic -Werror): extern "C" and no C-only
// constructs.
#include "accel/accel.h"

int main() {
  accel_status st = accel_config_new(nullptr);
  return st == ACCEL_ERR_INVALID_ARGUMENT ? 0 : 1;
}
