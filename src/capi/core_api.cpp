// Version, status names and the per-thread error message.
#include <string>

#include "capi/guard.hpp"

#define ACCEL_STRINGIFY2(x) #x
#define ACCEL_STRINGIFY(x) ACCEL_STRINGIFY2(x)

static_assert(static_cast<int>(accel::Errc::invalid_argument) == ACCEL_ERR_INVALID_ARGUMENT);
static_assert(static_cast<int>(accel::Errc::wrong_handle) == ACCEL_ERR_WRONG_HANDLE);
static_assert(static_cast<int>(accel::Errc::config) == ACCEL_ERR_CONFIG);
static_assert(static_cast<int>(accel::Errc::unsupported) == ACCEL_ERR_UNSUPPORTED);
static_assert(static_cast<int>(accel::Errc::io) == ACCEL_ERR_IO);
static_assert(static_cast<int>(accel::Errc::shape) == ACCEL_ERR_SHAPE);
static_assert(static_cast<int>(accel::Errc::dtype) == ACCEL_ERR_DTYPE);
static_assert(static_cast<int>(accel::Errc::rendezvous) == ACCEL_ERR_RENDEZVOUS);
static_assert(static_cast<int>(accel::Errc::timeout) == ACCEL_ERR_TIMEOUT);
static_assert(static_cast<int>(accel::Errc::peer_failed) == ACCEL_ERR_PEER_FAILED);
static_assert(static_cast<int>(accel::Errc::state) == ACCEL_ERR_STATE);
static_assert(static_cast<int>(accel::Errc::buffer_too_small) == ACCEL_ERR_BUFFER_TOO_SMALL);
static_assert(static_cast<int>(accel::Errc::callback) == ACCEL_ERR_CALLBACK);
static_assert(static_cast<int>(accel::Errc::out_of_memory) == ACCEL_ERR_OUT_OF_MEMORY);
static_assert(static_cast<int>(accel::Errc::torch) == ACCEL_ERR_TORCH);
static_assert(static_cast<int>(accel::Errc::internal) == ACCEL_ERR_INTERNAL);
static_assert(static_cast<int>(accel::Errc::cancelled) == ACCEL_ERR_CANCELLED);

namespace {

struct LastError {
  accel_status status = ACCEL_OK;
  std::string message;
};

LastError& last_error() {
  thread_local LastError e;
  return e;
}

}  // namespace

namespace accel::capi {

accel_status record_error(accel_status status, const char* message) noexcept {
  LastError& e = last_error();
  e.status = status;
  try {
    e.message = message ? message : "";
  } catch (...) {
    e.message.clear();  // no memory for the text: the status still tells the class
  }
  return status;
}

void fail_with_returned(accel_status rc, const std::string& who) {
  const bool known = rc > 0 && rc <= ACCEL_ERR_CANCELLED;
  const LastError& last = last_error();
  const std::string said = known && last.status == rc ? ": " + last.message : "";
  fail(known ? static_cast<Errc>(rc) : Errc::callback,
       who + " returned " + (known ? accel_status_name(rc) : std::to_string(rc)) + said);
}

const char* tag_name(uint32_t tag) noexcept {
  switch (static_cast<Tag>(tag)) {
    case Tag::kConfig:
      return "accel_config";
    case Tag::kTensor:
      return "accel_tensor";
    case Tag::kAccelerator:
      return "accel_accelerator";
    case Tag::kBytesList:
      return "accel_bytes_list";
    case Tag::kDataset:
      return "accel_dataset";
    case Tag::kDataloader:
      return "accel_dataloader";
    case Tag::kModel:
      return "accel_model";
    case Tag::kOptimizer:
      return "accel_optimizer";
    case Tag::kScheduler:
      return "accel_scheduler";
    case Tag::kTensorList:
      return "accel_tensor_list";
    case Tag::kStateWriter:
      return "accel_state_writer";
    case Tag::kSample:
      return "accel_sample";
    case Tag::kLocalSgd:
      return "accel_local_sgd";
    case Tag::kProfiler:
      return "accel_profiler";
    case Tag::kLoadReport:
      return "accel_load_report";
    case Tag::kTokenizer:
      return "accel_tokenizer";
    case Tag::kTrainer:
      return "accel_trainer";
    case Tag::kValues:
      return "accel_values";
    case Tag::kFreed:
      return "a handle that was already freed";
  }
  return "not a libaccel handle";
}

void require_capacity(size_t needed, const void* buf, size_t capacity, size_t* out_count,
                      const char* out_name, const char* what) {
  if (!out_count) fail(Errc::invalid_argument, std::string(out_name) + " is NULL");
  *out_count = needed;
  const size_t room = buf ? capacity : 0;
  if (room < needed)
    fail(Errc::buffer_too_small, std::string(what) + ": the buffer holds " + std::to_string(room) +
                                     "; " + std::to_string(needed) + " are needed");
}

void write_text(const std::string& text, char* buf, size_t capacity, size_t* out_size) {
  require_capacity(text.size() + 1, buf, capacity, out_size, "out_size", "text");
  std::memcpy(buf, text.c_str(), text.size() + 1);
}

}  // namespace accel::capi

extern "C" {

ACCEL_API const char* accel_version(void) {
  return ACCEL_STRINGIFY(ACCEL_VERSION_MAJOR) "." ACCEL_STRINGIFY(
      ACCEL_VERSION_MINOR) "." ACCEL_STRINGIFY(ACCEL_VERSION_PATCH);
}

ACCEL_API uint32_t accel_version_number(void) {
  return ACCEL_VERSION_NUMBER;
}

ACCEL_API const char* accel_last_error_message(void) {
  return last_error().message.c_str();
}

ACCEL_API accel_status accel_last_error_status(void) {
  return last_error().status;
}

ACCEL_API const char* accel_status_name(accel_status status) {
  switch (status) {
    case ACCEL_OK:
      return "ACCEL_OK";
    case ACCEL_ERR_INVALID_ARGUMENT:
      return "ACCEL_ERR_INVALID_ARGUMENT";
    case ACCEL_ERR_WRONG_HANDLE:
      return "ACCEL_ERR_WRONG_HANDLE";
    case ACCEL_ERR_CONFIG:
      return "ACCEL_ERR_CONFIG";
    case ACCEL_ERR_UNSUPPORTED:
      return "ACCEL_ERR_UNSUPPORTED";
    case ACCEL_ERR_IO:
      return "ACCEL_ERR_IO";
    case ACCEL_ERR_SHAPE:
      return "ACCEL_ERR_SHAPE";
    case ACCEL_ERR_DTYPE:
      return "ACCEL_ERR_DTYPE";
    case ACCEL_ERR_RENDEZVOUS:
      return "ACCEL_ERR_RENDEZVOUS";
    case ACCEL_ERR_TIMEOUT:
      return "ACCEL_ERR_TIMEOUT";
    case ACCEL_ERR_PEER_FAILED:
      return "ACCEL_ERR_PEER_FAILED";
    case ACCEL_ERR_STATE:
      return "ACCEL_ERR_STATE";
    case ACCEL_ERR_BUFFER_TOO_SMALL:
      return "ACCEL_ERR_BUFFER_TOO_SMALL";
    case ACCEL_ERR_CALLBACK:
      return "ACCEL_ERR_CALLBACK";
    case ACCEL_ERR_OUT_OF_MEMORY:
      return "ACCEL_ERR_OUT_OF_MEMORY";
    case ACCEL_ERR_TORCH:
      return "ACCEL_ERR_TORCH";
    case ACCEL_ERR_INTERNAL:
      return "ACCEL_ERR_INTERNAL";
    case ACCEL_ERR_CANCELLED:
      return "ACCEL_ERR_CANCELLED";
  }
  return "ACCEL_ERR_UNKNOWN_STATUS";
}

}  // extern "C"
