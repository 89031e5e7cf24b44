#include "runtime/npy_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>
#include <limits>
#include <map>
#include <regex>

#include <sys/mman.h>
#include <sys/stat.h>

#include "support/error.h"

namespace rannc::runtime {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLength = 6;
constexpr std::uint32_t kMaxHeader = 4096;

// NumPy type strings ("<f4") of the dtypes a model input can have.
ir::DType dtype_of(const std::string& descr) {
  static const std::map<std::string, ir::DType> kTypes = {
      {"<f4", ir::DType::kFloat32}, {"<f8", ir::DType::kFloat64}, {"<f2", ir::DType::kFloat16},
      {"<i8", ir::DType::kInt64},   {"<i4", ir::DType::kInt32},   {"<i2", ir::DType::kInt16},
      {"|i1", ir::DType::kInt8},    {"|u1", ir::DType::kUInt8},   {"|b1", ir::DType::kBool}};
  auto it = kTypes.find(descr);
  return it == kTypes.end() ? ir::DType::kUnknown : it->second;
}

std::uint32_t little_endian(const unsigned char* bytes, int count) {
  std::uint32_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = value << 8 | bytes[i];
  return value;
}

// `path`, unless it names something other than a regular file (a missing one fails to open).
const std::string& regular_or_missing(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) throw InputError(path + ": not a regular file");
  return path;
}

}  // namespace

// A FIFO or device would block or be read forever: only regular files are opened.
NpyFile::NpyFile(const std::string& path) : path_(regular_or_missing(path)), stream_(path, std::ios::binary) {
  if (!stream_) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  unsigned char prefix[12] = {};
  stream_.read(reinterpret_cast<char*>(prefix), 10);
  if (stream_.gcount() != 10 || std::memcmp(prefix, kMagic, kMagicLength) != 0) throw InputError(path + ": not a .npy file");
  int major = prefix[6];
  if (major < 1 || major > 3) throw InputError(path + ": .npy format version " + std::to_string(major) + " is not supported");
  std::uint32_t header_length = little_endian(prefix + 8, 2);
  data_offset_ = 10;
  if (major >= 2) {  // versions 2 and 3 have a 4-byte header length
    stream_.read(reinterpret_cast<char*>(prefix + 10), 2);
    header_length = little_endian(prefix + 8, 4);
    data_offset_ = 12;
  }
  // A plain array's header is about 128 bytes; a long one is not read (std::regex recurses per character).
  if (header_length > kMaxHeader) {
    throw InputError(path + ": .npy header of " + std::to_string(header_length) + " bytes (at most " +
                     std::to_string(kMaxHeader) + " are read)");
  }
  std::string header(header_length, '\0');
  stream_.read(header.data(), header_length);
  if (static_cast<std::uint32_t>(stream_.gcount()) != header_length) throw InputError(path + ": truncated .npy header");
  data_offset_ += header_length;
  parse_header(header);

  stream_.seekg(0, std::ios::end);
  std::int64_t data_bytes = static_cast<std::int64_t>(stream_.tellg()) - data_offset_;
  if (data_bytes < rows() * row_bytes_) {
    throw InputError(path + ": truncated: " + std::to_string(rows()) + " rows need " + std::to_string(rows() * row_bytes_) +
                     " bytes of data, the file has " + std::to_string(data_bytes));
  }
  map_data();
}

NpyFile::~NpyFile() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

// The whole file, mapped read-only: rows are copied out of the page cache as a step needs them,
// in any order (a shuffle), and only the pages of those rows are ever read from disk.
void NpyFile::map_data() {
  mapping_bytes_ = static_cast<std::size_t>(data_offset_ + rows() * row_bytes_);
  if (rows() * row_bytes_ == 0) return;
  int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(path_ + ": cannot open (" + std::strerror(errno) + ")");
  void* mapping = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  int error = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) throw InputError(path_ + ": cannot map (" + std::strerror(error) + ")");
  mapping_ = mapping;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (8, 3), }
void NpyFile::parse_header(const std::string& header) {
  std::smatch match;
  if (!std::regex_search(header, match, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw InputError(path_ + ": .npy header has no 'descr'");
  dtype_ = dtype_of(match[1]);
  if (dtype_ == ir::DType::kUnknown)
    throw InputError(path_ + ": .npy dtype '" + match[1].str() + "' is not supported (little-endian numbers or bool)");
  if (!std::regex_search(header, match, std::regex(R"('fortran_order'\s*:\s*(True|False))")))
    throw InputError(path_ + ": .npy header has no 'fortran_order'");
  if (match[1] == "True") throw InputError(path_ + ": Fortran-order .npy is not supported (save a C-contiguous array)");
  if (!std::regex_search(header, match, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw InputError(path_ + ": .npy header has no 'shape'");
  std::string dims = match[1];
  static const std::regex kNumber(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), kNumber), end; it != end; ++it)
    shape_.push_back(it->length() > 15 ? std::numeric_limits<std::int64_t>::max() : std::stoll(it->str()));
  if (shape_.empty()) throw InputError(path_ + ": a 0-dim .npy array has no rows");
  row_bytes_ = static_cast<std::int64_t>(ir::dtype_size(dtype_));
  constexpr std::int64_t kLimit = std::int64_t{1} << 50;  // far beyond any file, far from overflow
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] > kLimit || (d > 0 && row_bytes_ > kLimit / std::max<std::int64_t>(shape_[d], 1)))
      throw InputError(path_ + ": .npy shape is too large");
    if (d > 0) row_bytes_ *= shape_[d];
  }
}

std::vector<char> NpyFile::read_rows(std::int64_t first, std::int64_t count) {
  std::vector<char> bytes(static_cast<std::size_t>(std::max<std::int64_t>(count, 0) * row_bytes_));
  read_rows_into(first, count, bytes.data());
  return bytes;
}

void NpyFile::read_rows_into(std::int64_t first, std::int64_t count, void* destination) {
  if (first < 0 || count < 0 || first + count > rows()) {
    throw InputError(path_ + ": rows " + std::to_string(first) + ".." + std::to_string(first + count) + " asked of " +
                     std::to_string(rows()));
  }
  const auto bytes = static_cast<std::size_t>(count * row_bytes_);
  if (bytes) std::memcpy(destination, static_cast<const char*>(mapping_) + data_offset_ + first * row_bytes_, bytes);
  bytes_read_ += static_cast<std::int64_t>(bytes);
}

}  // namespace rannc::runtime
