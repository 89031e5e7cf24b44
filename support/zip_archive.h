// Reading zip archives that people hand us (torch.export's .pt2, TorchScript archives) through
// minizip, without trusting them: entry sizes are capped by the caller, a size the directory
// misstates or a failed CRC is an error, never a crash or an endless read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rannc {

class ZipArchive {
 public:
  // nullopt when `path` is not a zip archive minizip can open (the caller says what it is instead).
  static std::optional<ZipArchive> open(const std::string& path);

  const std::string& path() const { return path_; }
  // Entry names in the archive's order.
  const std::vector<std::string>& entries() const { return entries_; }
  bool has(const std::string& name) const;
  // The size the directory gives an entry (nullopt when there is no such entry).
  std::optional<std::uint64_t> size_of(const std::string& name) const;

  // The whole entry, at most `max_bytes` (InputError "PATH: ENTRY: ..." otherwise, or when the
  // data is damaged). `what` names the entry in messages ("the exported program").
  std::string read(const std::string& name, std::uint64_t max_bytes, const std::string& what) const;

 private:
  struct Handle;
  ZipArchive(std::string path, std::shared_ptr<Handle> handle);

  std::string path_;
  std::shared_ptr<Handle> handle_;
  std::vector<std::string> entries_;
  std::vector<std::uint64_t> sizes_;
};

}  // namespace rannc
