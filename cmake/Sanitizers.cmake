# Sanitizer builds. Included from the top CMakeLists.txt before any target is defined, so the flags
# below reach every target of the project (libraries, the CLI, tests, examples, benchmarks; C and C++).
#
#   cmake -S . -B build-asan -DACCEL_SANITIZE=address   # AddressSanitizer + LeakSanitizer + UBSan
#   cmake -S . -B build-tsan -DACCEL_SANITIZE=thread    # ThreadSanitizer
#
# tools/sanitize.sh configures, builds and runs these with the right *SAN_OPTIONS and the
# suppression files of tests/sanitizers/. Keep sanitizer builds in their own build directories:
# their objects and libaccel.so must never mix with a normal build's.
#
# Only what the project compiles is instrumented. LibTorch, Gloo, OpenBLAS and libgomp come from
# Debian uninstrumented: ASan still checks every access our code makes (malloc/free are intercepted
# process-wide), but TSan cannot see synchronisation done inside libgomp (see tests/sanitizers/).

set(ACCEL_SANITIZE "" CACHE STRING
  "Sanitizer build: empty = off, 'address' = ASan+UBSan, 'thread' = TSan")
set_property(CACHE ACCEL_SANITIZE PROPERTY STRINGS "" address thread)

if(ACCEL_SANITIZE STREQUAL "")
  return()
endif()

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ACCEL_SANITIZE needs GCC or Clang, not ${CMAKE_CXX_COMPILER_ID}")
endif()

if(ACCEL_SANITIZE STREQUAL "address")
  # -fno-sanitize-recover=undefined: the first UB report aborts the process, so the test fails
  # (ASan errors are never recoverable without -fsanitize-recover=address anyway).
  set(_accel_san_compile -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  set(_accel_san_link -fsanitize=address,undefined)
elseif(ACCEL_SANITIZE STREQUAL "thread")
  set(_accel_san_compile -fsanitize=thread)
  set(_accel_san_link -fsanitize=thread)
else()
  message(FATAL_ERROR "ACCEL_SANITIZE='${ACCEL_SANITIZE}': use '', 'address' or 'thread'")
endif()

# Readable stacks: frame pointers for the fast unwinder, line tables for file:line (-g1: reports
# need no variable or type info, and full -g made these builds ~40 % slower with LibTorch's headers).
list(APPEND _accel_san_compile -fno-omit-frame-pointer -g1)
add_compile_options(${_accel_san_compile})
# On every link, shared libraries included: GCC then records the sanitizer runtime as a dependency
# of libaccel.so itself, so -Wl,--no-undefined still holds for its __asan_*/__tsan_* references.
add_link_options(${_accel_san_link})

message(STATUS "Sanitizers: ${ACCEL_SANITIZE} (${_accel_san_compile})")
unset(_accel_san_compile)
unset(_accel_san_link)
