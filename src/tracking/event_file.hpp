// TensorBoard's event files, written without TensorFlow or Python: TFRecord framing (length,
// masked CRC32C of the length, the bytes, masked CRC32C of the bytes; little-endian) around
// protobuf-encoded Event messages (tensorflow/core/util/event.proto, summary.proto), encoded here
// by hand. Named as TensorBoard globs them: events.out.tfevents.<10-digit time>.<host>.<pid>.<n>.
#pragma once

#include <cstdint>
#include <string>

#include "tracking/output_file.hpp"

namespace accel::tracking {

// The protobuf bytes of one Event (exposed for tests; the writer frames them).
std::string scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
// A text summary as PyTorch's SummaryWriter.add_text writes it: tag "<tag>/text_summary", a
// string tensor of shape [1], the "text" plugin's metadata.
std::string text_event(const std::string& tag, const std::string& text, int64_t step,
                       double wall_time);
// The first record of every file: file_version "brain.Event:2".
std::string version_event(double wall_time);
// SessionLog START at `step`: TensorBoard's readers drop what earlier files hold at `step` and
// after (PyTorch's SummaryWriter purge_step).
std::string session_start_event(int64_t step, double wall_time);
// One TFRecord: the framing around `data`.
std::string frame_record(const std::string& data);

class EventFileWriter {
 public:
  // Creates a new event file in `dir` (which must exist) and writes its version record.
  // Throws accel::Error(io).
  void open(const std::string& dir, double wall_time);
  const std::string& path() const { return file_.path(); }
  // Each call is one write(2) of one record.
  void write_event(const std::string& event);
  // Records already framed (frame_record), several at once: one write(2).
  void append_records(const std::string& framed) { file_.append(framed); }
  void close() { file_.close(); }

 private:
  OutputFile file_;
};

}  // namespace accel::tracking
