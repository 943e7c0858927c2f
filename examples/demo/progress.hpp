// A one-line progress bar on stderr, drawn only when stderr is a terminal so logs and
// pipes stay clean.
#pragma once

#include <cstdint>
#include <string>

namespace demo {

class Progress {
 public:
  Progress(int64_t total, std::string label, bool allowed);
  ~Progress() { finish(); }
  void update(int64_t done, const std::string &note = "");
  // Clears the line (before printing a message, and at the end).
  void clear();
  void finish();

 private:
  int64_t total_;
  std::string label_;
  bool enabled_;
  double start_s_, last_draw_s_ = 0;
  bool drawn_ = false;
};

}  // namespace demo
