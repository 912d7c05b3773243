#include "tracking/event_file.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <unistd.h>

#include "common/error.hpp"
#include "tracking/crc32c.hpp"
#include "tracking/tracker.hpp"

namespace accel::tracking {
namespace {

// Protobuf wire format: a key is (field << 3) | wire type; 0 varint, 1 fixed64, 2 bytes, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

void put_int(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event{wall_time = 1, step = 2, summary = 5 {value = 1}}.
std::string event_with_value(const std::string& value, int64_t step, double wall_time) {
  std::string summary, event;
  put_bytes(summary, 1, value);
  put_double(event, 1, wall_time);
  if (step != kNoStep) put_int(event, 2, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
  return name;
}

}  // namespace

std::string scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string v;  // Summary.Value{tag = 1, simple_value = 2}
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  return event_with_value(v, step, wall_time);
}

std::string text_event(const std::string& tag, const std::string& text, int64_t step,
                       double wall_time) {
  std::string plugin, metadata, dim, shape, tensor, v;
  put_bytes(plugin, 1, "text");    // PluginData{plugin_name = 1}; TextPluginData v0 is empty
  put_bytes(metadata, 1, plugin);  // SummaryMetadata{plugin_data = 1}
  put_int(dim, 1, 1);              // TensorShapeProto.Dim{size = 1}
  put_bytes(shape, 2, dim);        // TensorShapeProto{dim = 2}
  put_int(tensor, 1, 7);           // TensorProto{dtype = 1: DT_STRING (7)}
  put_bytes(tensor, 2, shape);     //   tensor_shape = 2
  put_bytes(tensor, 8, text);      //   string_val = 8
  put_bytes(v, 1, tag + "/text_summary");
  put_bytes(v, 9, metadata);  // Summary.Value{metadata = 9, tensor = 8}
  put_bytes(v, 8, tensor);
  return event_with_value(v, step, wall_time);
}

std::string version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, "brain.Event:2");  // Event{file_version = 3}
  return event;
}

std::string session_start_event(int64_t step, double wall_time) {
  std::string log, event;
  put_int(log, 1, 1);  // SessionLog{status = 1: START}
  put_double(event, 1, wall_time);
  put_int(event, 2, step);
  put_bytes(event, 7, log);  // Event{session_log = 7}
  return event;
}

std::string frame_record(const std::string& data) {
  std::string length, out;
  put_le(length, data.size(), 8);
  out.reserve(data.size() + 16);
  out += length;
  put_le(out, masked_crc32c(length.data(), length.size()), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

void EventFileWriter::open(const std::string& dir, double wall_time) {
  // Unique per process by the counter, across processes by host and pid, as PyTorch names them.
  static std::atomic<unsigned> counter{0};
  char name[64];
  std::snprintf(name, sizeof name, "%010lld", static_cast<long long>(wall_time));
  const std::string stem = dir + "/events.out.tfevents." + name + "." + host_name() + "." +
                           std::to_string(::getpid()) + ".";
  file_.open(stem + std::to_string(counter++));
  write_event(version_event(wall_time));
}

void EventFileWriter::write_event(const std::string& event) {
  file_.append(frame_record(event));
}

}  // namespace accel::tracking
