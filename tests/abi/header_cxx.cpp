// The public headers compiled as C++ (-Wall -Wextra -pedantic -Werror): accel.h's extern "C" and
// no C-only constructs; accel.hpp without LibTorch.
#include "accel/accel.hpp"

int main() {
  accel_status st = accel_config_new(nullptr);
  try {
    accel::Config().set("no_such_key", "1");
    return 1;
  } catch (const accel::Error& e) {
    return st == ACCEL_ERR_INVALID_ARGUMENT && e.status() == ACCEL_ERR_CONFIG ? 0 : 1;
  }
}
