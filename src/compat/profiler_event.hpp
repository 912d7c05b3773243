// A profiler event's times in microseconds: LibTorch 1.13's KinetoEvent has startUs/durationUs,
// 2.x has startNs/durationNs only. Chosen by what the type has, not by version numbers.
#pragma once

#include <cstdint>

namespace accel::compat {

template <class Event>
auto start_us(const Event& e, int) -> decltype(e.startNs(), uint64_t()) {
  return e.startNs() / 1000;
}
template <class Event>
uint64_t start_us(const Event& e, long) {
  return e.startUs();
}
template <class Event>
uint64_t start_us(const Event& e) {
  return start_us(e, 0);
}

template <class Event>
auto duration_us(const Event& e, int) -> decltype(e.durationNs(), uint64_t()) {
  return e.durationNs() / 1000;
}
template <class Event>
uint64_t duration_us(const Event& e, long) {
  return e.durationUs();
}
template <class Event>
uint64_t duration_us(const Event& e) {
  return duration_us(e, 0);
}

}  // namespace accel::compat
