#include "support/zip_archive.h"

#include <unzip.h>

#include <algorithm>
#include <fstream>

#include "support/error.h"
#include "support/format.h"

namespace rannc {

struct ZipArchive::Handle {
  unzFile file = nullptr;
  ~Handle() {
    if (file) unzClose(file);
  }
};

namespace {

// Bounds what a hostile directory can make us allocate before reading a byte.
constexpr std::uint64_t kMaxEntries = 1 << 20;
constexpr std::size_t kMaxNameBytes = 4096;

// Whether the archive's end-of-central-directory record is where a whole archive has it: its
// 22 bytes and its comment end the file. A truncated archive can otherwise pass for another one
// that it holds stored (a .pt2 holds torch.save zips): minizip takes the last record it finds.
bool ends_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  auto size = static_cast<std::int64_t>(in.tellg());
  constexpr std::int64_t kRecord = 22, kMaxComment = 0xFFFF;
  std::int64_t start = std::max<std::int64_t>(0, size - kRecord - kMaxComment);
  std::string tail(static_cast<std::size_t>(size - start), '\0');
  in.seekg(start);
  if (!in.read(tail.data(), static_cast<std::streamsize>(tail.size()))) return false;
  for (auto at = static_cast<std::int64_t>(tail.size()) - kRecord; at >= 0; --at) {
    if (tail.compare(static_cast<std::size_t>(at), 4, "PK\x05\x06") != 0) continue;
    auto comment = static_cast<unsigned char>(tail[static_cast<std::size_t>(at + 20)]) |
                   static_cast<unsigned char>(tail[static_cast<std::size_t>(at + 21)]) << 8;
    if (at + kRecord + comment == static_cast<std::int64_t>(tail.size())) return true;
  }
  return false;
}

}  // namespace

ZipArchive::ZipArchive(std::string path, std::shared_ptr<Handle> handle)
    : path_(std::move(path)), handle_(std::move(handle)) {}

std::optional<ZipArchive> ZipArchive::open(const std::string& path) {
  if (!ends_whole(path)) return std::nullopt;
  auto handle = std::make_shared<Handle>();
  handle->file = unzOpen64(path.c_str());
  if (!handle->file) return std::nullopt;
  unz_global_info64 global{};
  if (unzGetGlobalInfo64(handle->file, &global) != UNZ_OK || global.number_entry > kMaxEntries) return std::nullopt;
  ZipArchive archive(path, handle);
  for (int status = unzGoToFirstFile(handle->file); status == UNZ_OK; status = unzGoToNextFile(handle->file)) {
    unz_file_info64 info{};
    std::string name(kMaxNameBytes, '\0');
    if (unzGetCurrentFileInfo64(handle->file, &info, name.data(), name.size(), nullptr, 0, nullptr, 0) != UNZ_OK)
      return std::nullopt;
    name.resize(std::min<std::size_t>(info.size_filename, kMaxNameBytes));
    archive.entries_.push_back(std::move(name));
    archive.sizes_.push_back(info.uncompressed_size);
  }
  return archive;
}

bool ZipArchive::has(const std::string& name) const { return size_of(name).has_value(); }

std::optional<std::uint64_t> ZipArchive::size_of(const std::string& name) const {
  auto it = std::find(entries_.begin(), entries_.end(), name);
  if (it == entries_.end()) return std::nullopt;
  return sizes_[static_cast<std::size_t>(it - entries_.begin())];
}

std::string ZipArchive::read(const std::string& name, std::uint64_t max_bytes, const std::string& what) const {
  auto fail = [&](const std::string& why) { return InputError(path_ + ": " + what + " (" + name + ") " + why); };
  auto size = size_of(name);
  if (!size) throw fail("is missing from the archive");
  if (*size > max_bytes) {
    throw fail("is " + human_bytes(static_cast<double>(*size)) + ", more than the " +
               human_bytes(static_cast<double>(max_bytes)) + " it may have");
  }
  unzFile file = handle_->file;
  if (unzLocateFile(file, name.c_str(), /*case sensitive*/ 1) != UNZ_OK || unzOpenCurrentFile(file) != UNZ_OK)
    throw fail("cannot be opened (a damaged or encrypted archive)");
  std::string data;
  data.reserve(static_cast<std::size_t>(*size));
  char buffer[1 << 16];
  int got = 0;
  // Read to the end whatever the directory said: a size it understates must not pass unseen.
  while ((got = unzReadCurrentFile(file, buffer, sizeof buffer)) > 0) {
    data.append(buffer, static_cast<std::size_t>(got));
    if (data.size() > *size) break;
  }
  int closed = unzCloseCurrentFile(file);
  if (got < 0 || data.size() != *size) throw fail("is damaged (its data does not match the archive's directory)");
  if (closed == UNZ_CRCERROR) throw fail("is damaged (CRC mismatch)");
  return data;
}

}  // namespace rannc
