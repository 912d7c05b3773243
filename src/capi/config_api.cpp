// accel_config_*: the configuration handle.
#include "capi/handles.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::guarded;
using accel::capi::require;

extern "C" {

ACCEL_API accel_status accel_config_new(accel_config** out) {
  return guarded([&] {
    require(out, "out");
    *out = new accel_config();
  });
}

ACCEL_API void accel_config_free(accel_config* config) {
  accel::capi::free_handle(config, "config");
}

ACCEL_API accel_status accel_config_set(accel_config* config, const char* key, const char* value) {
  return guarded([&] {
    checked(config, "config");
    require(key, "key");
    require(value, "value");
    std::unique_lock<std::shared_mutex> lock(config->mutex);
    config->config.set(key, value);
  });
}

ACCEL_API accel_status accel_config_load_file(accel_config* config, const char* path) {
  return guarded([&] {
    checked(config, "config");
    std::unique_lock<std::shared_mutex> lock(config->mutex);
    accel::config::Config copy = config->config;  // unchanged on failure
    if (path)
      copy.load_file(path);
    else
      copy.load_default_file(accel::config::process_environment());
    config->config = std::move(copy);
  });
}

ACCEL_API accel_status accel_config_get(const accel_config* config, const char* key, char* buf,
                                        size_t capacity, size_t* out_size) {
  return guarded([&] {
    checked(config, "config");
    require(key, "key");
    require(out_size, "out_size");
    if (!accel::config::find_key(key))
      fail(Errc::config, accel::config::unknown_key_message(
                             key, {accel::config::Source::kSetter, "accel_config_get"}));
    std::shared_lock<std::shared_mutex> lock(config->mutex);
    const auto resolved = config->config.resolve(accel::config::process_environment());
    accel::capi::write_text(resolved.text(key), buf, capacity, out_size);
  });
}

ACCEL_API accel_status accel_config_dump(const accel_config* config, char* buf, size_t capacity,
                                         size_t* out_size) {
  return guarded([&] {
    checked(config, "config");
    require(out_size, "out_size");
    std::shared_lock<std::shared_mutex> lock(config->mutex);
    const auto resolved = config->config.resolve(accel::config::process_environment());
    accel::capi::write_text(resolved.dump_yaml(), buf, capacity, out_size);
  });
}

}  // extern "C"
