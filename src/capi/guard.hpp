// The C ABI's boundary: every entry point runs its body through guarded(), which turns every C++
// exception into an accel_status and keeps the message for accel_last_error_message().
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "accel/accel.h"
#include "common/error.hpp"

namespace accel::capi {

// Records the failure for this thread and returns `status`. Never throws.
accel_status record_error(accel_status status, const char* message) noexcept;

// A status a program's callback returned, as the error it stands for: a libaccel status is that
// error (with libaccel's own message when it is the one this thread's last call failed with),
// any other nonzero value ACCEL_ERR_CALLBACK; `who` names the callback.
[[noreturn]] void fail_with_returned(accel_status rc, const std::string& who);

template <class F>
accel_status guarded(F&& body) noexcept {
  try {
    body();
    return ACCEL_OK;
  } catch (const accel::Error& e) {
    return record_error(static_cast<accel_status>(e.code()), e.what());
  } catch (const c10::Error& e) {
    const char* what = e.what_without_backtrace();
    return record_error(is_out_of_memory_message(what) ? ACCEL_ERR_OUT_OF_MEMORY : ACCEL_ERR_TORCH,
                        what);
  } catch (const std::bad_alloc&) {
    return record_error(ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return record_error(ACCEL_ERR_INTERNAL, e.what());
  } catch (...) {
    return record_error(ACCEL_ERR_INTERNAL, "unknown exception inside libaccel");
  }
}

// Tags at the start of every handle, so that a handle of the wrong kind is recognised.
enum class Tag : uint32_t {
  kConfig = 0xACC10001u,
  kTensor = 0xACC10002u,
  kAccelerator = 0xACC10003u,
  kBytesList = 0xACC10004u,
  kDataset = 0xACC10005u,
  kDataloader = 0xACC10006u,
  kModel = 0xACC10007u,
  kOptimizer = 0xACC10008u,
  kScheduler = 0xACC10009u,
  kTensorList = 0xACC1000Au,
  kStateWriter = 0xACC1000Bu,
  kSample = 0xACC1000Cu,
  kValues = 0xACC1000Du,
  kLocalSgd = 0xACC1000Eu,
  kProfiler = 0xACC1000Fu,
  kLoadReport = 0xACC10010u,
  kTokenizer = 0xACC10011u,
  kTrainer = 0xACC10012u,
  kFreed = 0xACC1DEADu,
};

const char* tag_name(uint32_t tag) noexcept;

template <class T>
Tag tag_of();

// The handle `p`, checked: NULL is invalid_argument, another kind is wrong_handle.
template <class T>
T* checked(T* p, const char* param) {
  if (!p) fail(Errc::invalid_argument, std::string(param) + " is NULL");
  uint32_t tag = 0;
  std::memcpy(&tag, static_cast<const void*>(p), sizeof tag);
  if (tag != static_cast<uint32_t>(tag_of<std::remove_const_t<T>>()))
    fail(Errc::wrong_handle, std::string(param) + " is not an " +
                                 tag_name(static_cast<uint32_t>(tag_of<std::remove_const_t<T>>())) +
                                 " (it is " + tag_name(tag) + ")");
  return p;
}

// Frees a handle of kind T if it is one; anything else is recorded as an error and left alone.
template <class T>
void free_handle(T* p, const char* param) noexcept {
  if (!p) return;
  guarded([&] {
    checked(p, param);
    const uint32_t freed = static_cast<uint32_t>(Tag::kFreed);
    std::memcpy(static_cast<void*>(p), &freed, sizeof freed);
    delete p;
  });
}

template <class T>
void require(const T* p, const char* param) {
  if (!p) fail(Errc::invalid_argument, std::string(param) + " is NULL");
}

// A getter of the ABI in one line: the handle checked (named `param` in messages), then `out`,
// then *out = read(*handle).
template <class Handle, class Out, class Read>
accel_status query(const Handle* handle, const char* param, Out* out, Read&& read) noexcept {
  return guarded([&] {
    checked(handle, param);
    require(out, "out");
    *out = read(*handle);
  });
}

// Writes `text` per the header's buffer convention.
void write_text(const std::string& text, char* buf, size_t capacity, size_t* out_size);

// The buffer convention's first step for an array of `needed` elements: sets *out_count (named
// `out_name` in messages) and fails with buffer_too_small, before the caller does any work, when
// `capacity` cannot hold them.
void require_capacity(size_t needed, const void* buf, size_t capacity, size_t* out_count,
                      const char* out_name, const char* what);

}  // namespace accel::capi
