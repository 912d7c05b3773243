#include <dlfcn.h>

#include <mutex>

#include "cuda/plugin.hpp"

namespace accel::cuda {

namespace {

// The directory of the object this function is linked into (libaccel.so).
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

const Plugin* load_plugin(std::string* why) {
  static std::once_flag once;
  static const Plugin* plugin = nullptr;
  static std::string reason;
  std::call_once(once, [] {
#ifndef ACCEL_CUDA_PLUGIN
    reason = "this libaccel was built without CUDA (its LibTorch has none)";
#else
    const std::string path = own_directory() + "/" ACCEL_CUDA_PLUGIN;
    // RTLD_GLOBAL: libtorch_cuda.so's symbols must stay visible to LibTorch's later lookups.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      const char* err = dlerror();
      reason = "libaccel's CUDA part did not load: " + std::string(err ? err : path);
      return;
    }
    using Entry = const Plugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "accel_cuda_plugin"));
    const Plugin* found = entry ? entry() : nullptr;
    if (!found || found->abi != kPluginAbi) {
      reason = path + " is not the CUDA part of this libaccel (another version)";
      return;
    }
    plugin = found;
#endif
  });
  if (!plugin && why) *why = reason;
  return plugin;
}

}  // namespace accel::cuda
