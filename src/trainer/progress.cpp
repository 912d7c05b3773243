#include "trainer/progress.hpp"

#include <chrono>
#include <string>

namespace accel::trainer {

namespace {

double now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string clock_text(double seconds) {
  const long s = seconds < 0 ? 0 : static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(bool on, long long total, long long first, std::FILE* out)
    : on_(on), total_(total), first_(first), step_(first), out_(out), start_(now()) {}

void ProgressBar::update(long long step, std::optional<double> loss) {
  if (!on_) return;
  step_ = step;
  if (loss) loss_ = loss;
  const double t = now();
  if (t - last_draw_ < 0.25 && step < total_) return;
  last_draw_ = t;
  draw(step);
}

void ProgressBar::draw(long long step) {
  drawn_ = step;
  const int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '-');
  const double elapsed = now() - start_;
  const double rate = elapsed > 0 ? static_cast<double>(step - first_) / elapsed : 0;
  const std::string left = rate > 0 ? clock_text(static_cast<double>(total_ - step) / rate) : "?";
  char loss[32] = "";
  if (loss_) std::snprintf(loss, sizeof loss, " loss %.4f", *loss_);
  std::fprintf(out_, "\r%lld/%lld [%s]%s %.2f it/s, %s left ", step, total_, bar.c_str(), loss,
               rate, left.c_str());
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (!on_) return;
  if (drawn_ != step_) draw(step_);
  std::fputc('\n', out_);
  std::fflush(out_);
  on_ = false;
}

}  // namespace accel::trainer
