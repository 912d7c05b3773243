// What a caller asks of a device map (accel_infer_device_map's options) and whether the answer
// fits what they gave: the text parsed into DeviceMapOptions, and a map that sends modules to disk
// when no disk was given refused with the bytes needed and given. Pure C++ (no LibTorch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bigmodel/device_map.hpp"

namespace accel::bigmodel {

struct MapRequest {
  DeviceMapOptions options;
  bool disk = false;  // "disk" was named in max_memory: modules may be offloaded
};

// "max_memory=cpu:200MB,disk no_split_module_classes=Block,Other fallback_allocation=true":
// key=value pairs separated by whitespace or ';' (a comma ending a pair is dropped), lists inside a
// value separated by ','. max_memory's entries are "cpu:SIZE" (SIZE as max_shard_size: "200MB",
// "1GiB", "12345") and "disk"; it is required. Only cpu and disk: libaccel's big-model inference
// runs on the CPU. Throws accel::Error(invalid_argument) naming what is wrong.
MapRequest parse_map_request(const std::string& text);

// Throws accel::Error(out_of_memory) when `map` puts a module on disk and the request gave none:
// the model's bytes, the cpu budget, and what would have gone to disk.
void check_fits(const DeviceMap& map, const std::map<std::string, int64_t>& sizes,
                const MapRequest& request);

// "name=device" lines, the root's name empty ("=cpu").
std::vector<std::string> map_lines(const DeviceMap& map);

// map_lines' lines (separated by newlines, spaces or ';') parsed back; each device cpu or disk.
DeviceMap parse_map_lines(const std::string& text);

}  // namespace accel::bigmodel
