// A frontend reads one kind of model file into the IR. Each is registered once here and
// recognises its files by content (never by extension): the rest of the compiler asks the Model
// it loaded and its ModelSource, never which frontend made them, so another file format is an
// addition here and in its own folder, not an edit of every pass.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/model.h"
#include "support/zip_archive.h"

namespace rannc {

// What is known of a file before a frontend reads it: a zip archive's entries, or that it is none.
struct FileProbe {
  std::string path;
  std::optional<ZipArchive> zip;
};

class Frontend {
 public:
  virtual ~Frontend() = default;
  virtual ModelFormat format() const = 0;
  // Whether the file is of this frontend's kind, by content.
  virtual bool recognizes(const FileProbe& probe) const = 0;
  // The model lowered to the IR; InputError with one line for anything it cannot read.
  virtual Model load(const std::string& path, const LoadOptions& options) const = 0;
};

// Every frontend, in the order they are asked (the most specific first).
const std::vector<const Frontend*>& frontends();

}  // namespace rannc
