#include "ir/module_path.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

namespace rannc::ir {
namespace {

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t begin = 0;;) {
    auto end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

// Letters, digits, '_' and '.' between components: what a module's qualified name is made of.
bool is_qualified_name(std::string_view path) {
  if (path.empty() || path.front() == '.' || path.back() == '.') return false;
  for (char c : path) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    if (!ok) return false;
  }
  return path.find("..") == std::string_view::npos;
}

// "layers.3" -> {"layers.", 3}; nullopt when the block does not end in a number, or writes it
// with a leading zero (which a range could not give back).
struct Numbered {
  std::string_view stem;
  long long number = 0;
};

std::optional<Numbered> numbered(std::string_view block) {
  std::size_t digits = block.size();
  while (digits > 0 && block[digits - 1] >= '0' && block[digits - 1] <= '9') --digits;
  std::size_t count = block.size() - digits;
  if (count == 0 || digits == 0 || count > 15 || (count > 1 && block[digits] == '0')) return std::nullopt;
  return Numbered{block.substr(0, digits), std::stoll(std::string(block.substr(digits)))};
}

}  // namespace

std::string module_path_from_onnx_name(std::string_view node_name) {
  if (node_name.size() < 2 || node_name.front() != '/') return "";
  auto parts = split(node_name.substr(1), '/');
  parts.pop_back();  // the node's own name
  std::string path;
  std::string_view previous;
  for (auto part : parts) {
    if (part.empty()) continue;
    // Each scope is named by the last atom of its module's qualified name that is not a number,
    // with the numbers after it: "layers.0" for encoder.layers.0 (a ModuleList's child, whose
    // list forward never calls), but also for the child 0 of a Sequential called as "layers".
    // The second repeats the scope above it: only its numbers are new.
    auto rest = part.substr(std::min(previous.size() + 1, part.size()));
    bool child_of_previous = !previous.empty() && part.size() > previous.size() + 1 &&
                             part.substr(0, previous.size()) == previous && part[previous.size()] == '.';
    if (child_of_previous)
      for (auto atom : split(rest, '.')) child_of_previous = child_of_previous && all_digits(atom);
    if (!path.empty()) path += '.';
    path += child_of_previous ? rest : part;
    previous = part;
  }
  return is_qualified_name(path) ? path : "";
}

std::string module_path_from_nn_module_stack(std::string_view stack) {
  std::string_view innermost;
  for (auto entry : split(stack, ';')) {
    auto first = entry.find(',');
    auto last = entry.rfind(',');
    if (first == std::string_view::npos || last == first) continue;
    if (entry.substr(0, first).rfind("_empty_nn_module_stack", 0) == 0) continue;
    auto path = entry.substr(first + 1, last - first - 1);
    if (is_qualified_name(path)) innermost = path;
  }
  return std::string(innermost);
}

std::string module_block(std::string_view path) {
  auto parts = split(path, '.');
  auto upto = [&](std::size_t last) {
    std::size_t end = 0;
    for (std::size_t i = 0; i <= last; ++i) end += parts[i].size() + (i ? 1 : 0);
    return std::string(path.substr(0, end));
  };
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (all_digits(parts[i])) return upto(i);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto underscore = parts[i].rfind('_');
    if (underscore != std::string_view::npos && underscore > 0 && all_digits(parts[i].substr(underscore + 1))) return upto(i);
  }
  return upto(0);
}

std::vector<std::string> module_blocks(const Graph& graph, const std::vector<OpId>& ops) {
  // The module paths seen (each cut to its block once), and the blocks named: a stage's share of
  // a model of many stages costs its own ops, not the whole model's paths.
  std::unordered_set<std::int32_t> seen;
  std::unordered_set<std::string> named;
  std::vector<std::string> blocks;
  for (auto id : ops) {
    auto module = graph.op(id).module;
    if (module == kNoId || !seen.insert(module).second) continue;
    auto block = module_block(graph.module_paths()[static_cast<std::size_t>(module)]);
    if (named.insert(block).second) blocks.push_back(std::move(block));
  }
  return blocks;
}

std::string modules_summary(const std::vector<std::string>& blocks, std::size_t max_chars) {
  std::string text;
  auto add = [&](const std::string& item) { text += (text.empty() ? "" : ", ") + item; };
  for (std::size_t i = 0; i < blocks.size();) {
    auto first = numbered(blocks[i]);
    std::size_t j = i + 1;
    if (first) {
      for (long long next = first->number + 1; j < blocks.size(); ++j, ++next) {
        auto n = numbered(blocks[j]);
        if (!n || n->stem != first->stem || n->number != next) break;
      }
    }
    if (j - i == 1) {
      add(blocks[i]);
    } else {
      add(blocks[i] + "-" + std::to_string(first->number + static_cast<long long>(j - i - 1)));
    }
    i = j;
    if (text.size() > max_chars) break;  // the rest would be cut anyway
  }
  if (text.size() > max_chars) text = text.substr(0, max_chars >= 3 ? max_chars - 3 : 0) + "...";
  return text;
}

}  // namespace rannc::ir
