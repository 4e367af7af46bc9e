#include "runtime/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace hypic {

int open_regular_file(const std::string& path, const std::string& what, size_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; a regular file ignores the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + what + " '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError("cannot stat " + what + " '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode)    ? "a folder"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    throw IoError(what + " '" + path + "' is " + kind + ", not a regular file");
  }
  // Back to blocking reads (a regular file never blocks, but keep the descriptor ordinary).
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
  size_t size = 0;
  const int fd = open_regular_file(path, what, &size);
  if (size > max_bytes) {
    ::close(fd);
    throw IoError(what + " '" + path + "' is " + std::to_string(size) + " bytes, more than the limit of " +
                  std::to_string(max_bytes));
  }
  std::string out;
  out.resize(size);
  size_t got = 0;
  // Read until EOF, not just st_size bytes: the file may grow meanwhile, and the limit still holds.
  while (true) {
    if (got == out.size()) {
      if (out.size() >= max_bytes + 1) break;
      out.resize(std::min(max_bytes + 1, std::max<size_t>(4096, out.size() * 2)));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError("cannot read " + what + " '" + path + "': " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > max_bytes)
    throw IoError(what + " '" + path + "' is more than the limit of " + std::to_string(max_bytes) + " bytes");
  out.resize(got);
  return out;
}

}  // namespace hypic
