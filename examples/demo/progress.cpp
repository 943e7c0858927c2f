#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "clock.hpp"

namespace demo {

Progress::Progress(int64_t total, std::string label, bool allowed)
    : total_(total), label_(std::move(label)), enabled_(allowed && isatty(STDERR_FILENO)), start_s_(now_s()) {}

void Progress::update(int64_t done, const std::string &note) {
  if (!enabled_) return;
  const double t = now_s();
  if (done < total_ && t - last_draw_s_ < 0.1) return;  // ~10 redraws a second at most
  last_draw_s_ = t;
  const int width = 30;
  const double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int fill = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(fill), '#');
  bar.resize(width, '.');
  const double elapsed = t - start_s_;
  const double eta = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
  std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld %5.1fs eta %4.0fs %s", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), elapsed, eta, note.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void Progress::finish() {
  clear();
  enabled_ = false;
}

}  // namespace demo
