#include "support/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "support/error.h"

namespace rannc {
namespace {

class Digest {
 public:
  Digest() : context_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!context_ || EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1)
      throw Error(ExitStatus::kBadInput, "SHA-256 is not available");
  }
  void add(const void* data, std::size_t size) { EVP_DigestUpdate(context_.get(), data, size); }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int length = 0;
    EVP_DigestFinal_ex(context_.get(), digest.data(), &length);
    std::string text;
    char byte[3];
    for (unsigned int i = 0; i < length; ++i) {
      std::snprintf(byte, sizeof byte, "%02x", digest[i]);
      text += byte;
    }
    return text;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context_;
};

}  // namespace

std::string sha256_of_file(const std::string& path) {
  // Without blocking on a FIFO, and only a regular file: /dev/zero would be read forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot read the file: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw InputError(path + ": cannot read the file: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw InputError(path + ": not a regular file");
  Digest context;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputError(path + ": read error: " + std::strerror(errno));
    }
    if (got == 0) break;
    context.add(buffer.data(), static_cast<std::size_t>(got));
  }
  return context.hex();
}

std::string sha256_of_text(std::string_view text) {
  Digest context;
  context.add(text.data(), text.size());
  return context.hex();
}

}  // namespace rannc
