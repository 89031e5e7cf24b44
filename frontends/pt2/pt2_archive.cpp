#include "frontends/pt2/pt2_archive.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "compiler/torch_plugin.h"
#include "frontends/foreign_file.h"
#include "frontends/pt2/exported_program.h"
#include "support/error.h"
#include "support/input_file.h"

namespace rannc {
namespace {

constexpr std::uint64_t kMaxProgramBytes = std::uint64_t{1} << 30;
constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{256} << 20;
constexpr std::uint64_t kMaxTensorBytes = std::uint64_t{1} << 40;

constexpr const char* kFlatProgram = "serialized_exported_program.json";  // PyTorch 2.6 and 2.7

bool starts_with(const std::string& text, const std::string& prefix) { return text.compare(0, prefix.size(), prefix) == 0; }

// The folder every entry of a PT2 archive (and a TorchScript archive) sits in, with its '/'.
std::string top_folder(const ZipArchive& zip) {
  if (zip.entries().empty()) return "";
  const auto& first = zip.entries().front();
  auto slash = first.find('/');
  return slash == std::string::npos ? "" : first.substr(0, slash + 1);
}

bool has_prefix(const ZipArchive& zip, const std::string& prefix) {
  return std::any_of(zip.entries().begin(), zip.entries().end(), [&](const auto& e) { return starts_with(e, prefix); });
}

bool is_pt2_archive(const ZipArchive& zip, const std::string& root) {
  auto format = root + "archive_format";
  return zip.has(format) && zip.size_of(format) < 64 && zip.read(format, 64, "the archive format") == "pt2";
}

// models/<name>.json of a PT2 archive: "model" when there, else the first.
std::optional<std::string> model_name(const ZipArchive& zip, const std::string& root) {
  std::vector<std::string> names;
  const auto folder = root + "models/";
  for (const auto& entry : zip.entries()) {
    if (!starts_with(entry, folder) || entry.size() < folder.size() + 6 || entry.compare(entry.size() - 5, 5, ".json") != 0) continue;
    auto name = entry.substr(folder.size(), entry.size() - folder.size() - 5);
    if (name.find('/') == std::string::npos) names.push_back(name);
  }
  if (names.empty()) return std::nullopt;
  return std::find(names.begin(), names.end(), "model") != names.end() ? "model" : names.front();
}

// The tensor a raw payload holds: the storage's bytes viewed through sizes, strides and offset;
// nullopt for an empty payload of a tensor with elements (PyTorch's fake tensor: no data, as a
// shape-only export). Every element it reads is checked to lie in the storage before anything
// is allocated, and the tensor may not be larger than its storage (but for an expanded view,
// a stride of 0, up to kMaxExpandedBytes): a config cannot make us allocate what it does not hold.
constexpr std::int64_t kMaxExpandedBytes = std::int64_t{1} << 30;

std::optional<StoredTensor> strided_copy(const std::string& storage, const pt2::TensorMeta& meta,
                                         const nlohmann::json& raw_meta, const std::string& what) {
  StoredTensor tensor;
  tensor.dtype = meta.dtype;
  const int size = ir::dtype_size(meta.dtype);
  if (size == 0) throw InputError(what + " has dtype code " + std::to_string(meta.dtype_code) + ", which has no tensor type here");
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
  for (const auto& d : meta.sizes) {
    if (!d.value) throw InputError(what + " has a symbolic size");
    tensor.dims.push_back(*d.value);
  }
  auto as_int = [](const nlohmann::json& v) -> std::optional<std::int64_t> {
    if (v.is_object() && v.contains("as_int") && v["as_int"].is_number_integer()) return v["as_int"].get<std::int64_t>();
    return std::nullopt;
  };
  for (const auto& s : raw_meta.value("strides", nlohmann::json::array())) {
    auto stride = as_int(s);
    if (!stride) throw InputError(what + " has a stride that is not an integer");
    strides.push_back(*stride);
  }
  if (auto o = raw_meta.find("storage_offset"); o != raw_meta.end() && !o->is_null()) {
    auto value = as_int(*o);
    if (!value || *value < 0) throw InputError(what + " has a storage offset that is not a non-negative integer");
    offset = *value;
  }
  if (strides.size() != tensor.dims.size()) throw InputError(what + " has " + std::to_string(strides.size()) + " strides for " +
                                                           std::to_string(tensor.dims.size()) + " dims");
  auto numel = ir::checked_numel(tensor.dims);
  if (!numel || static_cast<__int128>(*numel) * size > std::numeric_limits<std::int64_t>::max())
    throw InputError(what + " has an element count beyond 64 bits");
  if (*numel == 0) return tensor;
  if (storage.empty()) return std::nullopt;  // a fake tensor: no data
  // The first and last element it reads.
  __int128 lowest = offset, highest = offset;
  bool expanded = false;
  for (std::size_t d = 0; d < strides.size(); ++d) {
    __int128 reach = static_cast<__int128>(tensor.dims[d] - 1) * strides[d];
    (reach < 0 ? lowest : highest) += reach;
    expanded = expanded || (strides[d] == 0 && tensor.dims[d] > 1);
  }
  auto bytes = static_cast<std::int64_t>(*numel * size);
  if (lowest < 0 || (highest + 1) * size > static_cast<__int128>(storage.size()))
    throw InputError(what + " reads past its storage (" + std::to_string(storage.size()) + " bytes)");
  if (bytes > static_cast<std::int64_t>(storage.size()) && (!expanded || bytes > kMaxExpandedBytes))
    throw InputError(what + " is " + std::to_string(bytes) + " bytes, more than its storage of " + std::to_string(storage.size()) +
                     " holds");
  tensor.data.resize(static_cast<std::size_t>(bytes));
  std::vector<std::int64_t> index(tensor.dims.size(), 0);
  for (std::int64_t i = 0; i < *numel; ++i) {
    __int128 element = offset;
    for (std::size_t d = 0; d < index.size(); ++d) element += static_cast<__int128>(index[d]) * strides[d];
    std::memcpy(&tensor.data[static_cast<std::size_t>(i * size)], &storage[static_cast<std::size_t>(element * size)],
                static_cast<std::size_t>(size));
    for (auto d = static_cast<int>(index.size()) - 1; d >= 0 && ++index[d] == tensor.dims[d]; --d) index[d] = 0;
  }
  return tensor;
}

}  // namespace

std::optional<Pt2Archive> Pt2Archive::recognize(const ZipArchive& zip) {
  if (zip.has(kFlatProgram)) {
    Pt2Archive archive(zip);
    archive.program_entry_ = kFlatProgram;
    archive.state_dict_entry_ = "serialized_state_dict.pt";
    archive.constants_entry_ = "serialized_constants.pt";
    return archive;
  }
  auto root = top_folder(zip);
  if (root.empty() || !is_pt2_archive(zip, root)) return std::nullopt;
  auto model = model_name(zip, root);
  if (!model) return std::nullopt;  // an AOTInductor package: describe_other names it
  Pt2Archive archive(zip);
  archive.pt2_layout_ = true;
  archive.prefix_ = root;
  archive.program_entry_ = root + "models/" + *model + ".json";
  // PyTorch 2.8 stores a torch.save file per model; 2.9 and later raw payloads and a config.
  auto weights = root + "data/weights/" + *model;
  auto constants = root + "data/constants/" + *model;
  if (zip.has(weights + ".pt")) archive.state_dict_entry_ = weights + ".pt";
  else archive.weights_config_entry_ = weights + "_weights_config.json";
  if (zip.has(constants + ".pt")) archive.constants_entry_ = constants + ".pt";
  else archive.constants_config_entry_ = constants + "_constants_config.json";
  return archive;
}

std::string Pt2Archive::describe_other(const ZipArchive& zip) {
  auto root = top_folder(zip);
  // An AOTInductor package, a torch.save file: named as every foreign file is (frontends/foreign_file.h).
  if (!root.empty() && is_pt2_archive(zip, root) && has_prefix(zip, root + "data/aotinductor/"))
    return describe_foreign_zip(zip).value_or("");
  if (!root.empty() && is_pt2_archive(zip, root))
    return std::string("a PT2 archive without a model (no models/*.json): ") + kExportAdvice;
  if (!root.empty() && zip.has(root + "data.pkl") && !has_prefix(zip, root + "code/"))
    return describe_foreign_zip(zip).value_or(std::string("tensors saved with torch.save, not a model: ") + kExportAdvice);
  return "";
}

std::string Pt2Archive::program_text() const { return zip_.read(program_entry_, kMaxProgramBytes, "the exported program"); }

const std::map<std::string, StoredTensor>& Pt2Archive::tensors() const {
  std::call_once(cache_->once, [&] { cache_->tensors = read_tensors(); });
  return cache_->tensors;
}

std::map<std::string, StoredTensor> Pt2Archive::read_tensors() const {
  auto tensors = state_dict_entry_.empty() ? read_pt2_payloads(weights_config_entry_, "the weights")
                                           : read_torch_save(state_dict_entry_, "the state dict");
  auto constants = constants_entry_.empty() ? read_pt2_payloads(constants_config_entry_, "the constants")
                                            : read_torch_save(constants_entry_, "the constants");
  tensors.merge(constants);
  return tensors;
}

std::map<std::string, StoredTensor> Pt2Archive::read_torch_save(const std::string& entry, const std::string& what) const {
  if (!zip_.has(entry)) return {};
  auto bytes = zip_.read(entry, kMaxTensorBytes, what);
  // Tensors of the meta device (a model exported under `with torch.device("meta")`): no data,
  // a shape-only export. torch.save stores its pickle uncompressed, so the name is in the bytes.
  if (bytes.find("_rebuild_meta_tensor_no_storage") != std::string::npos) return {};
  return torch_plugin().read_saved_tensors(bytes, zip_.path() + ": " + what + " (" + entry + ")");
}

std::map<std::string, StoredTensor> Pt2Archive::read_pt2_payloads(const std::string& config_entry,
                                                                  const std::string& what) const {
  if (!zip_.has(config_entry)) return {};
  auto where = zip_.path() + ": " + config_entry;
  auto text = zip_.read(config_entry, kMaxConfigBytes, what + " config");
  check_json_depth(text, where);
  auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object() || !config.contains("config") || !config["config"].is_object())
    throw InputError(where + ": not a weights config (a JSON object with a \"config\" object)");
  std::map<std::string, StoredTensor> tensors;
  const auto folder = prefix_ + (what == "the weights" ? "data/weights/" : "data/constants/");
  for (auto it = config["config"].begin(); it != config["config"].end(); ++it) {
    const auto& payload = *it;
    // A name quoted in messages: kept short, as a hostile config's keys need not be.
    auto name = "'" + (it.key().size() > 120 ? it.key().substr(0, 117) + "..." : it.key()) + "'";
    if (!payload.is_object() || !payload.contains("path_name") || !payload["path_name"].is_string())
      throw InputError(where + ": " + name + " has no path_name");
    if (!payload.contains("tensor_meta") || payload["tensor_meta"].is_null()) continue;  // a custom object
    if (payload["path_name"].get_ref<const std::string&>().size() > 1024)
      throw InputError(where + ": " + name + " has a path_name of " +
                       std::to_string(payload["path_name"].get_ref<const std::string&>().size()) + " characters");
    auto file = folder + payload["path_name"].get<std::string>();
    auto storage = zip_.read(file, kMaxTensorBytes, what + " " + name);
    if (payload.contains("use_pickle") && payload["use_pickle"].is_boolean() && payload["use_pickle"].get<bool>()) {
      auto pickled = torch_plugin().read_saved_tensors(storage, where + ": " + name);
      if (pickled.size() != 1) throw InputError(where + ": " + name + " is a pickled payload of " + std::to_string(pickled.size()) + " tensors");
      tensors[it.key()] = std::move(pickled.begin()->second);
      continue;
    }
    auto meta = pt2::parse_tensor_meta(payload["tensor_meta"], where + ": " + name);
    if (auto tensor = strided_copy(storage, meta, payload["tensor_meta"], where + ": " + name)) tensors[it.key()] = std::move(*tensor);
  }
  return tensors;
}

}  // namespace rannc
