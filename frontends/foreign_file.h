// Files people hand over that are no model the frontends take (a state_dict, safetensors, a
// NumPy array, a Keras .h5, a plan.json, a tarball, ...), recognised by content (magic bytes and
// structure, never the extension) and named in one line with what to give instead. Reads at most
// a few KiB of the file (and a zip archive's directory): a huge file or /dev/zero never hangs it.
#pragma once

#include <optional>
#include <string>

#include "support/zip_archive.h"

namespace rannc {

// How to make a file the tool reads; the one advice every message on a foreign file gives.
inline constexpr const char* kExportAdvice =
    "export the model with torch.jit.trace/torch.jit.script(...).save, torch.onnx.export or torch.export.save";

// What the file is and what to give instead ("a safetensors file (weights only), not a model:
// export the model with ..."), without the path; nullopt when it is none of the kinds known here
// (a model, or a file a frontend is left to reject). Never throws for a file it cannot read.
std::optional<std::string> describe_foreign_file(const std::string& path);

// The same for a zip archive no frontend took: a torch.save state_dict or pickled module, an
// AOTInductor package, a NumPy .npz; nullopt for other zips.
std::optional<std::string> describe_foreign_zip(const ZipArchive& zip);

}  // namespace rannc
