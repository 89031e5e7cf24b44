#include "frontends/foreign_file.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "support/error.h"
#include "support/input_file.h"

namespace rannc {
namespace {

// What is read of a file to tell its kind: enough for every magic number here (HDF5's superblock
// may sit at 2048, tar's at 257) and for the keys at the top of a JSON object.
constexpr std::size_t kHeadBytes = 16 << 10;
// A torch.save pickle is read only this far: its first object tells a state_dict from a module.
constexpr std::uint64_t kMaxPickleBytes = std::uint64_t{256} << 10;

std::string exported(const std::string& what) { return what + ": " + kExportAdvice; }

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string read_head(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return {};  // a FIFO or a device is read forever
  std::ifstream in(path, std::ios::binary);
  std::string head(kHeadBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return head;
}

std::uint64_t little_endian_u64(std::string_view bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return value;
}

std::uint32_t little_endian_u32(std::string_view bytes) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return value;
}

// --- pickles (torch.save) ---

// The magic number torch.save's legacy format pickles first (a long of 10 bytes).
constexpr std::string_view kLegacyTorchMagic("\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 12);

bool is_pickle_protocol(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && bytes[1] >= 2 && bytes[1] <= 5;
}

// A name read from the file, for a message: printable, short.
std::string shown(std::string_view name) { return text_excerpt(name, 60); }

// What the object a pickle starts with is, from its first opcodes: an OrderedDict (a state_dict),
// a dict (a checkpoint), an instance of a class (a pickled module), or "" when not told.
std::string pickled_object(std::string_view pickle) {
  std::size_t at = 0;
  if (is_pickle_protocol(pickle)) at = 2;
  if (at < pickle.size() && static_cast<unsigned char>(pickle[at]) == 0x95) at += 9;  // FRAME (protocol 4+)
  if (at >= pickle.size()) return "";
  auto op = [&](std::size_t p) { return p < pickle.size() ? static_cast<unsigned char>(pickle[p]) : 0u; };
  auto skip_memo = [&](std::size_t& p) {  // BINPUT, LONG_BINPUT, MEMOIZE
    if (op(p) == 'q') p += 2;
    else if (op(p) == 'r') p += 5;
    else if (op(p) == 0x94) p += 1;
  };
  // A string opcode (SHORT_BINUNICODE, BINUNICODE, SHORT_BINSTRING): its text, `p` past it.
  auto read_string = [&](std::size_t& p, std::string& out) {
    std::size_t length = 0, header = 0;
    if (op(p) == 0x8c || op(p) == 'U') length = op(p + 1), header = 2;
    else if (op(p) == 'X' && p + 5 <= pickle.size()) length = little_endian_u32(pickle.substr(p + 1, 4)), header = 5;
    else return false;
    if (p + header + length > pickle.size()) return false;
    out = std::string(pickle.substr(p + header, length));
    p += header + length;
    skip_memo(p);
    return true;
  };
  // A global (GLOBAL "module\nname\n", or two strings and STACK_GLOBAL): "module.name", `p` past it.
  auto read_global = [&](std::size_t& p, std::string& out) {
    std::string module, name;
    if (op(p) == 'c') {
      auto end_module = pickle.find('\n', p + 1);
      auto end_name = end_module == std::string_view::npos ? end_module : pickle.find('\n', end_module + 1);
      if (end_name == std::string_view::npos || end_name - p > 512) return false;
      module = std::string(pickle.substr(p + 1, end_module - p - 1));
      name = std::string(pickle.substr(end_module + 1, end_name - end_module - 1));
      p = end_name + 1;
    } else if (!read_string(p, module) || !read_string(p, name) || op(p) != 0x93) {
      return false;
    } else {
      ++p;
    }
    skip_memo(p);
    out = module + "." + name;
    return true;
  };
  std::string global;
  if (op(at) == '}') {  // a dict: of tensors (a state_dict), or of anything else (a checkpoint)
    std::size_t p = at + 1;
    skip_memo(p);
    if (op(p) == '(') ++p;  // MARK
    std::string key;
    if (read_string(p, key) && read_global(p, global) && starts_with(global, "torch._utils._rebuild_")) return "state_dict";
    return "dict";
  }
  if (!read_global(at, global)) return "";
  if (global == "collections.OrderedDict") return "state_dict";
  return "class " + shown(global);
}

// The kind of thing torch.save stored, from its object pickle; `legacy` for the non-zip format.
std::string torch_save_kind(std::string_view object_pickle, bool legacy) {
  const std::string format = legacy ? " in its legacy format (not a zip)" : "";
  auto object = pickled_object(object_pickle);
  if (object == "state_dict") return exported("a state_dict saved with torch.save" + format + ", not a model");
  if (object == "dict")
    return exported("a checkpoint (a dict, e.g. of state_dicts) saved with torch.save" + format + ", not a model");
  if (starts_with(object, "class "))
    return exported("a module (" + object.substr(6) + ") pickled with torch.save(model)" + format + ", not a model");
  return exported("tensors saved with torch.save" + format + ", not a model");
}

// torch.save's legacy format: pickles of the magic number, the protocol version and the system's
// sizes, then the object's.
std::string describe_legacy_torch_save(std::string_view head) {
  std::size_t at = 0;
  for (int stops = 0; stops < 3 && at != std::string_view::npos; ++stops) {
    at = head.find(std::string_view(".\x80", 2), at);
    if (at != std::string_view::npos) ++at;
  }
  return torch_save_kind(at == std::string_view::npos ? std::string_view() : head.substr(at), /*legacy=*/true);
}

// --- JSON ---

// Whether `text` has the key "key" with the string value "value" (anywhere in the excerpt).
bool has_string_field(std::string_view text, std::string_view key, std::string_view value) {
  const std::string quoted_key = "\"" + std::string(key) + "\"";
  for (auto at = text.find(quoted_key); at != std::string_view::npos; at = text.find(quoted_key, at + 1)) {
    auto p = at + quoted_key.size();
    while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
    if (p >= text.size() || text[p] != ':') continue;
    ++p;
    while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
    if (text.substr(p, value.size() + 2) == "\"" + std::string(value) + "\"") return true;
  }
  return false;
}

bool has_key(std::string_view text, std::string_view key) {
  return text.find("\"" + std::string(key) + "\"") != std::string_view::npos;
}

std::optional<std::string> describe_json(std::string_view head) {
  std::size_t p = starts_with(head, "\xEF\xBB\xBF") ? 3 : 0;  // a UTF-8 byte order mark
  while (p < head.size() && std::isspace(static_cast<unsigned char>(head[p]))) ++p;
  if (p >= head.size() || (head[p] != '{' && head[p] != '[')) return std::nullopt;
  if (head[p] == '{') {  // an object: its first key follows
    auto q = p + 1;
    while (q < head.size() && std::isspace(static_cast<unsigned char>(head[q]))) ++q;
    if (q < head.size() && head[q] != '"' && head[q] != '}') return std::nullopt;
  }
  if (has_string_field(head, "format", "rannc-plan"))
    return "a plan written by rannc-partition, not a model: use rannc-partition show/verify or rannc-run on it";
  if (has_string_field(head, "format", "rannc-profile-db"))
    return "a profile DB written by rannc-partition profile, not a model: give it with --profile-db";
  if (has_key(head, "gpus_per_node") && has_key(head, "nodes"))
    return "a cluster description, not a model: give it with --cluster";
  return exported("a JSON file, not a model");
}

// --- zips ---

// Entry names without the archive's top folder (torch.save and PT2 archives put all in one).
std::vector<std::string_view> names_below_top(const ZipArchive& zip) {
  std::vector<std::string_view> names;
  for (const auto& entry : zip.entries()) {
    std::string_view name(entry);
    auto slash = name.find('/');
    names.push_back(slash == std::string_view::npos ? name : name.substr(slash + 1));
    names.push_back(name);
  }
  return names;
}

}  // namespace

std::optional<std::string> describe_foreign_zip(const ZipArchive& zip) {
  const auto names = names_below_top(zip);
  auto any = [&](auto predicate) { return std::any_of(names.begin(), names.end(), predicate); };
  if (any([](std::string_view n) { return starts_with(n, "data/aotinductor/"); }))
    return std::string("an AOTInductor package (compiled code, no graph): give the torch.export.save file instead");
  // torch.save: <name>/data.pkl and the tensors' data, no code/ of a TorchScript archive.
  if (!zip.entries().empty()) {
    const auto& first = zip.entries().front();
    auto slash = first.find('/');
    const std::string root = slash == std::string::npos ? "" : first.substr(0, slash + 1);
    const bool has_code = std::any_of(zip.entries().begin(), zip.entries().end(),
                                      [&](const std::string& e) { return starts_with(e, root + "code/"); });
    if (!root.empty() && zip.has(root + "data.pkl") && !zip.has(root + "constants.pkl") && !has_code) {
      std::string pickle;
      auto size = zip.size_of(root + "data.pkl");
      try {
        if (size && *size <= kMaxPickleBytes) pickle = zip.read(root + "data.pkl", kMaxPickleBytes, "the pickle");
      } catch (const Error&) {
        pickle.clear();  // damaged: named by what it seems to be all the same
      }
      return torch_save_kind(pickle, /*legacy=*/false);
    }
  }
  if (!names.empty() && std::all_of(names.begin(), names.end(), [](std::string_view n) {
        return ends_with(n, ".npy") || ends_with(n, "/") || n.empty();
      }))
    return exported("NumPy arrays saved with numpy.savez, not a model");
  if (zip.has("config.json") && (zip.has("model.weights.h5") || zip.has("metadata.json")))
    return "a Keras model (.keras), not a model this tool reads: convert it to ONNX (tf2onnx), or " +
           std::string(kExportAdvice);
  for (const auto& entry : zip.entries()) {
    for (std::string_view suffix : {".onnx", ".pt2", ".pt", ".pth"}) {
      if (ends_with(entry, suffix) && entry.find("/data/") == std::string::npos)
        return "a zip archive holding '" + shown(entry) + "': unzip it and give that file";
    }
  }
  return std::nullopt;
}

std::optional<std::string> describe_foreign_file(const std::string& path) {
  const std::string head = read_head(path);
  const std::string_view h(head);
  if (h.size() < 4) return std::nullopt;
  auto at = [&](std::size_t offset, std::string_view magic) {
    return offset <= h.size() && h.substr(offset, magic.size()) == magic;
  };
  auto byte = [&](std::size_t i) { return i < h.size() ? static_cast<unsigned char>(h[i]) : 0u; };

  if (at(0, "PK\x03\x04") || at(0, std::string_view("PK\x05\x06", 4))) {
    auto zip = ZipArchive::open(path);
    return zip ? describe_foreign_zip(*zip) : std::nullopt;
  }
  if (is_pickle_protocol(h) && at(2, kLegacyTorchMagic)) return describe_legacy_torch_save(h);
  if (is_pickle_protocol(h)) {
    auto object = pickled_object(h);
    if (object == "state_dict") return exported("a state_dict pickled without torch.save, not a model");
    return exported("a Python pickle" + (starts_with(object, "class ") ? " (" + object + ")" : std::string()) +
                    ", not a model");
  }
  if (at(0, "\x93NUMPY")) return exported("a NumPy array saved with numpy.save, not a model");
  for (std::size_t offset : {0, 512, 1024, 2048}) {
    if (at(offset, "\x89HDF\r\n\x1a\n"))
      return "an HDF5 file (Keras .h5?), not a model this tool reads: convert it to ONNX (tf2onnx), or " +
             std::string(kExportAdvice);
  }
  if (at(0, "GGUF"))
    return "a GGUF file (llama.cpp weights), not a model this tool reads: from the PyTorch model it came from, " +
           std::string(kExportAdvice);
  if (h.size() >= 8 && at(4, "TFL3"))
    return "a TensorFlow Lite model, not a model this tool reads: convert it to ONNX (tf2onnx --tflite), or " +
           std::string(kExportAdvice);
  if (byte(0) == 0x1f && byte(1) == 0x8b) return std::string("a gzip-compressed file: decompress it (gunzip) and give the model inside");
  if (at(0, "BZh") && byte(3) >= '1' && byte(3) <= '9' && at(4, "\x31\x41\x59\x26\x53\x59"))
    return std::string("a bzip2-compressed file: decompress it (bunzip2) and give the model inside");
  if (at(0, std::string_view("\xFD" "7zXZ\x00", 6)))
    return std::string("an xz-compressed file: decompress it (unxz) and give the model inside");
  if (at(0, "\x28\xB5\x2F\xFD")) return std::string("a zstd-compressed file: decompress it (unzstd) and give the model inside");
  if (at(0, "7z\xBC\xAF\x27\x1C")) return std::string("a 7-Zip archive: unpack it (7z x) and give the model inside");
  if (at(257, "ustar")) return std::string("a tar archive: unpack it (tar -xf) and give the model inside");
  if (at(0, "\x7f" "ELF"))
    return exported("a compiled program or shared library (an AOTInductor model.so?), not a model");
  // safetensors: the JSON header's length (8 bytes, little-endian), then the header.
  if (h.size() >= 10 && at(8, "{\"")) {
    std::error_code error;
    auto size = std::filesystem::file_size(path, error);
    auto header = little_endian_u64(h);
    if (!error && header >= 2 && header <= size - 8) return exported("a safetensors file (weights only), not a model");
  }
  return describe_json(h);
}

}  // namespace rannc
