// Which LibTorch line this file is compiled against: 1.13 (Debian 12) or 2.x. Compat headers in
// this folder test ACCEL_TORCH2 so that the rest of the code need not.
#pragma once

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/csrc/api/include/torch/version.h>
#endif

#define ACCEL_TORCH2 (TORCH_VERSION_MAJOR >= 2)
