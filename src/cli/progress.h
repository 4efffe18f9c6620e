// Progress of long work for the `dsv4` tool and the benchmarks, on stderr: on a terminal one live
// line, rewritten in place and erased before anything else is printed; when stderr is a pipe or a
// file, one flushed plain line per step (never the in-place details), so logs show where a long
// run is without carriage returns.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace dsv4cli {

class Progress {
 public:
  enum class Mode { kAuto, kOff };
  // kAuto: live line when `stream` is a terminal, plain lines otherwise.
  explicit Progress(Mode mode = Mode::kAuto, std::FILE* stream = stderr);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A new step ("flash c4a: timing"): the live line on a terminal, one line when piped. The
  // current step's own text again is no new step.
  void step(const std::string& text);
  // Detail of the current step ("run 3 of 6"): the live line only, at most ~10 times a second.
  void detail(const std::string& text);
  // Erases the live line; call before printing anything else to the terminal.
  void clear();
  bool live() const { return live_; }

 private:
  void draw(const std::string& text);
  std::FILE* stream_;
  bool enabled_;
  bool live_;  // stream is a terminal
  bool shown_ = false;
  std::string step_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace dsv4cli
