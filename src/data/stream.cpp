#include "data/stream.hpp"

#include <cstdio>
#include <cstring>
#include <map>

#include "common/error.hpp"

namespace accel::data {

SampleWriter::SampleWriter(const std::vector<FieldSpec>& specs, Sample& sample, int64_t position)
    : specs_(specs), sample_(sample), position_(position), written_(specs.size(), false) {
  sample_.fields.assign(specs.size(), {});
  sample_.rows.assign(specs.size(), 0);
}

void SampleWriter::set_field(size_t field, const void* data, size_t size) {
  try {
    write(field, data, size);
    failures_.erase(field);  // a good write of the field makes an earlier failed one good
  } catch (const Error& e) {
    // Kept: a callback that ignores the failure and returns 0 still fails with this message.
    failures_.emplace(field, e);
    throw;
  }
}

void SampleWriter::write(size_t field, const void* data, size_t size) {
  const std::string sample = "sample " + std::to_string(position_);
  if (field >= specs_.size())
    fail(Errc::invalid_argument, sample + ": field " + std::to_string(field) +
                                     " is out of range: the dataset has " +
                                     std::to_string(specs_.size()) + " fields");
  if (size > 0 && !data) fail(Errc::invalid_argument, sample + ": data is NULL");
  const auto& spec = specs_[field];
  const size_t row = row_bytes(spec);
  const std::string where = sample + ", field " + std::to_string(field) + ": ";
  if (!spec.ragged && size != row)
    fail(Errc::shape, where + std::to_string(size) +
                          " bytes given, and one sample of the field is " + std::to_string(row) +
                          " bytes");
  if (spec.ragged && row > 0 && size % row != 0)
    fail(Errc::shape, where + std::to_string(size) +
                          " bytes given, not a whole number of rows of " + std::to_string(row) +
                          " bytes");
  const int64_t rows = spec.ragged && row > 0 ? static_cast<int64_t>(size / row) : 1;
  if (spec.ragged && rows > kMaxSampleLength)
    fail(Errc::shape, where + std::to_string(rows) + " rows, above the largest accepted (" +
                          std::to_string(kMaxSampleLength) + ")");
  const auto* bytes = static_cast<const unsigned char*>(data);
  sample_.fields[field].assign(bytes, bytes + size);
  sample_.rows[field] = rows;
  written_[field] = true;
}

void SampleWriter::check_complete() const {
  if (!failures_.empty()) throw failures_.begin()->second;
  for (size_t f = 0; f < written_.size(); ++f)
    if (!written_[f])
      fail(Errc::callback, "the stream callback returned sample " + std::to_string(position_) +
                               " without writing field " + std::to_string(f));
}

std::string SampleWriter::failure_note() const {
  return failures_.empty() ? ""
                           : std::string(" after accel_sample_set_field failed: ") +
                                 failures_.begin()->second.what();
}

StreamDataset::StreamDataset(std::vector<FieldSpec> specs) : specs_(std::move(specs)) {}

std::vector<bool> StreamDataset::ragged_fields() const {
  std::vector<bool> out;
  for (const auto& s : specs_) out.push_back(s.ragged);
  return out;
}

std::vector<at::Tensor> StreamDataset::get_batch(const std::vector<int64_t>&,
                                                 const std::vector<FieldPadding>&,
                                                 const std::atomic<bool>*) const {
  fail(Errc::internal, "a stream is read in order, not by index");
}

namespace {

class CallbackStream final : public StreamDataset {
 public:
  CallbackStream(std::vector<FieldSpec> fields, StreamFn fn, ReleaseFn release, void* user_data)
      : StreamDataset(std::move(fields)), fn_(std::move(fn)), release_(release), user_(user_data) {}
  ~CallbackStream() override {
    if (release_) release_(user_);
  }
  std::unique_ptr<StreamReader> open(int64_t epoch) const override {
    return std::make_unique<Reader>(*this, epoch);
  }

 private:
  class Reader final : public StreamReader {
   public:
    Reader(const CallbackStream& s, int64_t epoch) : s_(s), epoch_(epoch) {}
    bool next(Sample& out) override {
      if (ended_) return false;
      SampleWriter writer(s_.specs(), out, position_);
      const int32_t rc = call(writer);
      if (rc == 1) {
        ended_ = true;
        return false;
      }
      if (rc != 0)
        fail(Errc::callback, "the stream callback returned " + std::to_string(rc) + " for sample " +
                                 std::to_string(position_) + " of epoch " + std::to_string(epoch_));
      writer.check_complete();
      ++position_;
      return true;
    }

   private:
    int32_t call(SampleWriter& writer) {
      mark_sample_callback(true);
      struct Unmark {
        ~Unmark() { mark_sample_callback(false); }
      } unmark;
      return s_.fn_(epoch_, position_, writer);
    }
    const CallbackStream& s_;
    int64_t epoch_;
    int64_t position_ = 0;
    bool ended_ = false;
  };

  StreamFn fn_;
  ReleaseFn release_;
  void* user_;
};

class TextLines final : public StreamDataset {
 public:
  explicit TextLines(std::string path)
      : StreamDataset({FieldSpec{at::kByte, {-1}, true}}), path_(std::move(path)) {
    open(0);  // a missing file is an error now, not at the first batch
  }
  std::unique_ptr<StreamReader> open(int64_t) const override {
    return std::make_unique<Reader>(path_);
  }

 private:
  class Reader final : public StreamReader {
   public:
    explicit Reader(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
      if (!f_) fail(Errc::io, "cannot open text file '" + path + "': " + std::strerror(errno));
    }
    ~Reader() override { std::fclose(f_); }
    bool next(Sample& out) override {
      std::vector<unsigned char> line;
      int c;
      while ((c = std::fgetc(f_)) != EOF && c != '\n')
        line.push_back(static_cast<unsigned char>(c));
      if (std::ferror(f_)) fail(Errc::io, "reading text file '" + path_ + "' failed");
      if (c == EOF && line.empty()) return false;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      out.rows.assign(1, static_cast<int64_t>(line.size()));
      out.fields.assign(1, std::move(line));
      return true;
    }

   private:
    std::string path_;
    std::FILE* f_;
  };
  std::string path_;
};

}  // namespace

std::shared_ptr<Dataset> callback_stream(std::vector<FieldSpec> fields, StreamFn fn,
                                         ReleaseFn release, void* user_data) {
  if (fields.empty()) fail(Errc::invalid_argument, "a dataset needs at least one field");
  if (!fn) fail(Errc::invalid_argument, "the stream callback is NULL");
  for (size_t f = 0; f < fields.size(); ++f)
    for (size_t d = fields[f].ragged ? 1 : 0; d < fields[f].shape.size(); ++d)
      if (fields[f].shape[d] < 0)
        fail(Errc::shape,
             "field " + std::to_string(f) + "'s sample shape has a negative dimension");
  return std::make_shared<CallbackStream>(std::move(fields), std::move(fn), release, user_data);
}

std::shared_ptr<Dataset> text_lines_stream(const std::string& path) {
  return std::make_shared<TextLines>(path);
}

}  // namespace accel::data
