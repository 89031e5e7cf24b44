// The parts of a torch.export archive, in either layout PyTorch writes:
//  - PyTorch 2.6: serialized_exported_program.json, serialized_state_dict.pt and
//    serialized_constants.pt (torch.save files), version;
//  - the PT2 archive of 2.7 and later: archive_format ("pt2"), models/<name>.json,
//    data/weights/* with a weights config, data/constants/* with a constants config.
// Recognised by content, never by extension: a zip that is a TorchScript archive, a torch.save
// file or an AOTInductor package is told apart and named.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler/stage_source.h"
#include "support/zip_archive.h"

namespace rannc {

class Pt2Archive {
 public:
  // The archive's layout when `zip` is a torch.export archive with a program to plan; nullopt
  // when it is another kind of zip.
  static std::optional<Pt2Archive> recognize(const ZipArchive& zip);
  // What a zip that is no .pt2 holds, in words, with what to do instead; "" when it is not told.
  static std::string describe_other(const ZipArchive& zip);

  std::string layout_name() const { return pt2_layout_ ? "PT2 archive" : "PyTorch 2.6 layout"; }
  // The ExportedProgram's JSON text (at most 1 GiB).
  std::string program_text() const;
  std::string program_where() const { return zip_.path() + ": " + program_entry_; }

  // The tensors the archive stores by name: state_dict names of parameters and buffers, and the
  // names of tensor constants. Read on first use (the torch plugin unpickles torch.save data);
  // InputError naming the archive when it holds none (a shape-only export) or they are damaged.
  const std::map<std::string, StoredTensor>& tensors() const;

 private:
  explicit Pt2Archive(ZipArchive zip) : zip_(std::move(zip)) {}
  std::map<std::string, StoredTensor> read_tensors() const;
  std::map<std::string, StoredTensor> read_torch_save(const std::string& entry, const std::string& what) const;
  std::map<std::string, StoredTensor> read_pt2_payloads(const std::string& config_entry, const std::string& what) const;

  ZipArchive zip_;
  bool pt2_layout_ = false;
  std::string program_entry_;
  std::string state_dict_entry_, constants_entry_;              // PyTorch 2.6
  std::string weights_config_entry_, constants_config_entry_;  // PT2 archive
  std::string prefix_;                                          // the PT2 archive's top folder, with '/'
  struct Cache {
    std::once_flag once;
    std::map<std::string, StoredTensor> tensors;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace rannc
