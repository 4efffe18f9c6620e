#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace dsv4cli {
namespace {

int terminal_columns(std::FILE* stream) {
  winsize size{};
  if (ioctl(fileno(stream), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

}  // namespace

Progress::Progress(Mode mode, std::FILE* stream)
    : stream_(stream),
      enabled_(mode != Mode::kOff),
      live_(enabled_ && isatty(fileno(stream)) != 0),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { clear(); }

void Progress::step(const std::string& text) {
  if (!enabled_ || text == step_) return;
  step_ = text;
  if (live_) {
    draw(text);
    return;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stream_, "[%6.1f s] %s\n", seconds, text.c_str());
  std::fflush(stream_);
}

void Progress::detail(const std::string& text) {
  if (!live_) return;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  draw(step_.empty() ? text : step_ + ": " + text);
}

void Progress::clear() {
  if (!shown_) return;
  std::fputs("\r\033[K", stream_);
  std::fflush(stream_);
  shown_ = false;
}

void Progress::draw(const std::string& text) {
  last_draw_ = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(last_draw_ - start_).count();
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "[%6.1f s] ", seconds);
  std::string line = prefix + text;
  // A line longer than the terminal wraps, and \r would then rewrite only its last row.
  const size_t width = static_cast<size_t>(terminal_columns(stream_)) - 1;
  if (line.size() > width) line.resize(width);
  std::fprintf(stream_, "\r\033[K%s", line.c_str());
  std::fflush(stream_);
  shown_ = true;
}

}  // namespace dsv4cli
