#include "torch_side/state_dict_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstring>
#include <sstream>
#include <set>

#include "support/input_file.h"
#include "torch_side/torch_error.h"

namespace rannc {
namespace {

constexpr std::string_view kOrderedDict = "collections\nOrderedDict\n";

// The bytes of the argument that follows a pickle opcode: fixed, a length prefix, or lines.
struct Argument {
  int fixed = 0;         // bytes of a fixed-size argument
  int length_bytes = 0;  // bytes of a little-endian length, then that many bytes
  int lines = 0;         // newline-terminated lines
};

// Protocol 2, what torch.save writes by default. Another opcode is refused, not guessed at.
std::optional<Argument> argument_of(unsigned char op) {
  switch (op) {
    case '(': case '.': case '0': case '1': case '2': case 'N': case 0x88: case 0x89: case ')': case 't':
    case 0x85: case 0x86: case 0x87: case ']': case 'a': case 'e': case 'l': case '}': case 'd': case 's':
    case 'u': case 'b': case 'R': case 0x81: case 'Q': case 'o':
      return Argument{};
    case 0x80: case 'K': case 'q': case 'h': case 0x82: return Argument{1};
    case 'M': case 0x83: return Argument{2};
    case 'J': case 'r': case 'j': case 0x84: return Argument{4};
    case 'G': return Argument{8};
    case 0x8a: case 'U': case 'C': return Argument{0, 1};
    case 0x8b: case 'T': case 'X': case 'B': return Argument{0, 4};
    case 'I': case 'L': case 'F': case 'S': case 'V': case 'p': case 'g': case 'P': return Argument{0, 0, 1};
    case 'c': case 'i': return Argument{0, 0, 2};
    default: return std::nullopt;
  }
}

std::uint64_t little_endian(std::string_view bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = bytes.size(); i-- > 0;) value = value << 8 | static_cast<unsigned char>(bytes[i]);
  return value;
}

// One opcode and its argument, from `at` on.
struct Instruction {
  unsigned char op = 0;
  std::string_view whole, argument;
};

Instruction next_instruction(std::string_view pickle, std::size_t at) {
  auto op = static_cast<unsigned char>(pickle[at]);
  auto shape = argument_of(op);
  if (!shape) throw std::runtime_error("unsupported pickle opcode " + std::to_string(op) + " (save with torch.save's default protocol)");
  std::size_t end = at + 1;
  auto need = [&](std::size_t bytes) {
    if (bytes > pickle.size() - end) throw std::runtime_error("the pickle ends inside an instruction");
    end += bytes;
  };
  need(static_cast<std::size_t>(shape->fixed));
  if (shape->length_bytes > 0) {
    need(static_cast<std::size_t>(shape->length_bytes));
    need(little_endian(pickle.substr(end - shape->length_bytes, shape->length_bytes)));
  }
  for (int line = 0; line < shape->lines; ++line) {
    auto newline = pickle.find('\n', end);
    if (newline == std::string_view::npos) throw std::runtime_error("the pickle ends inside an instruction");
    end = newline + 1;
  }
  return {op, pickle.substr(at, end - at), pickle.substr(at + 1, end - at - 1)};
}

// Where each value on the pickle machine's stack begins in the output, so that an instruction's
// argument can be cut out again.
class StackStarts {
 public:
  void push(std::size_t at) { starts_.push_back(at); }
  void mark(std::size_t at) { marks_.push_back({starts_.size(), at}); }
  // Pops `count` values and pushes their result, which begins where the first of them did.
  void combine(std::size_t count) {
    if (count == 0 || count > starts_.size()) throw std::runtime_error("malformed pickle (stack underflow)");
    starts_.resize(starts_.size() - count + 1);
  }
  void pop(std::size_t count) {
    if (count > starts_.size()) throw std::runtime_error("malformed pickle (stack underflow)");
    starts_.resize(starts_.size() - count);
  }
  // Pops to the last mark; returns where the mark was.
  std::size_t pop_mark() {
    if (marks_.empty() || marks_.back().first > starts_.size()) throw std::runtime_error("malformed pickle (no mark)");
    auto [depth, at] = marks_.back();
    marks_.pop_back();
    starts_.resize(depth);
    return at;
  }
  // Where the value `depth` below the top begins (0: the top).
  std::size_t start(std::size_t depth = 0) const {
    if (depth >= starts_.size()) throw std::runtime_error("malformed pickle (stack underflow)");
    return starts_[starts_.size() - 1 - depth];
  }

 private:
  std::vector<std::size_t> starts_;
  std::vector<std::pair<std::size_t, std::size_t>> marks_;
};

// The stack effect of an instruction on StackStarts.
void track(StackStarts& stack, unsigned char op, std::size_t at) {
  switch (op) {
    case 0x80: case 'q': case 'r': case 'p': case '.': return;
    case '(': stack.mark(at); return;
    case 't': case 'l': case 'd': stack.pop_mark(), stack.push(at); return;  // the container starts at its mark
    case 'e': case 'u': stack.pop_mark(); return;
    case 0x85: case 'Q': stack.combine(1); return;
    case 0x86: case 'R': case 0x81: stack.combine(2); return;
    case 0x87: stack.combine(3); return;
    case 'a': case 'b': stack.pop(1); return;
    case 's': stack.pop(2); return;
    default: stack.push(at); return;  // every other protocol 2 opcode pushes one value
  }
}

// libtorch 1.13's unpickler turns collections.OrderedDict into None (it expects one only among a
// tensor's arguments) and has neither POP nor SETITEM, so a state_dict fails to load
// (pytorch/pytorch#100741), and so does any dict of one tensor. Rewritten here: each call
// `OrderedDict()` becomes an empty dict (the class itself one that is never filled), BUILD, which
// only sets the state_dict's `_metadata`, is cut out with its argument, and SETITEM becomes a
// SETITEMS of one pair.
std::string plain_dicts(std::string_view pickle) {
  std::string out;
  StackStarts stack;
  std::set<std::uint64_t> class_slots;  // memo slots that hold the OrderedDict class
  bool class_on_top = false;
  for (std::size_t at = 0; at < pickle.size();) {
    Instruction in = next_instruction(pickle, at);
    at += in.whole.size();
    bool is_class = (in.op == 'c' && in.argument == kOrderedDict) ||
                    ((in.op == 'h' || in.op == 'j') && class_slots.count(little_endian(in.argument)));
    if (in.op == ')' && class_on_top && at < pickle.size() && pickle[at] == 'R') {
      ++at;  // the dict standing for the class is the call's result
      class_on_top = false;
      continue;
    }
    if (in.op == 'b') {
      out.resize(stack.start());
      stack.pop(1);
      class_on_top = false;
      continue;
    }
    if (in.op == 's') {
      out.insert(stack.start(1), 1, '(');  // a mark before the key; nothing after it is on the stack
      stack.pop(2);
      out += 'u';
      class_on_top = false;
      continue;
    }
    track(stack, in.op, out.size());
    if (in.op == 'q' || in.op == 'r') {
      if (class_on_top) class_slots.insert(little_endian(in.argument));
      else class_slots.erase(little_endian(in.argument));
    } else {
      class_on_top = is_class;
    }
    if (is_class) out += '}';
    else out += in.whole;
  }
  return out;
}

// torch.save wraps each nn.Parameter in torch._utils._rebuild_parameter(tensor, requires_grad,
// hooks) (an ExportedProgram's state dict does), which libtorch 1.13's unpickler does not know.
// It hands unknown globals to a type resolver and their call's arguments to an object loader:
// the resolver names a class of one tensor slot, the loader keeps the tensor there, and
// `unwrap_parameters` takes it back out.
// (_rebuild_parameter_with_state adds the parameter's __dict__, which a plain one has empty.)
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr const char* kRebuildParameterWithState = "torch._utils._rebuild_parameter_with_state";

c10::IValue unwrap_parameter(const c10::IValue& value) {
  if (!value.isObject()) return value;
  auto object = value.toObject();
  auto name = object->type()->name() ? object->type()->name()->qualifiedName() : "";
  if (name == kRebuildParameter || name == kRebuildParameterWithState) return object->getSlot(0);
  return value;
}

c10::IValue unpickle_archive(caffe2::serialize::PyTorchStreamReader& archive) {
  auto [data, size] = archive.getRecord("data.pkl");
  std::string pickle = plain_dicts({static_cast<const char*>(data.get()), size});
  std::size_t read = 0;
  auto reader = [&](char* buffer, std::size_t length) {
    length = std::min(length, pickle.size() - read);
    std::memcpy(buffer, pickle.data() + read, length);
    read += length;
    return length;
  };
  auto record = [&](const std::string& name) { return std::get<0>(archive.getRecord("data/" + name)); };
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  auto resolve = [&](const c10::QualifiedName& name) {
    const auto& qualified = name.qualifiedName();
    if (qualified != kRebuildParameter && qualified != kRebuildParameterWithState) {
      // A type tag of libtorch's own pickles ("Dict[str, Tensor]"), as without a resolver.
      return c10::StrongTypePtr(unit, torch::jit::Unpickler::defaultTypeParser(qualified));
    }
    auto type = c10::ClassType::create(name, unit);
    type->addAttribute("data", c10::TensorType::get());
    return c10::StrongTypePtr(unit, type);
  };
  auto load = [&](const c10::StrongTypePtr& type, c10::IValue arguments) {
    auto object = c10::ivalue::Object::create(type, 1);
    if (!arguments.isTuple() || arguments.toTupleRef().elements().empty()) throw InputError("holds a malformed parameter");
    object->setSlot(0, arguments.toTupleRef().elements()[0]);
    return object;
  };
  torch::jit::Unpickler unpickler(reader, resolve, load, record, c10::nullopt);
  unpickler.set_version(archive.version());
  auto value = unpickler.parse_ivalue();
  if (!value.isGenericDict()) return value;
  auto dict = value.toGenericDict();
  for (auto it = dict.begin(); it != dict.end(); ++it) it->setValue(unwrap_parameter(it->value()));
  return value;
}

TensorDict tensors_of(const c10::IValue& value, const std::string& where) {
  if (!value.isGenericDict()) throw InputError(where + ": holds a " + value.tagKind() + ", not a dict of tensors");
  TensorDict tensors;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor())
      throw InputError(where + ": an entry is not a name and a tensor (a " + entry.value().tagKind() + ")");
    tensors.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
  }
  return tensors;
}

}  // namespace

// Pickled without libtorch's type tags (torch.jit._pickle.restore_type_tag), which PyTorch 2.6's
// torch.load refuses by default (weights_only=True): a plain dict of plain tensors loads anywhere.
std::string state_dict_bytes(const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  // On the CPU, as torch.save(state_dict) of a GPU model would not be: the file loads anywhere.
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.detach().to(at::kCPU).contiguous());
  std::string pickle;
  torch::jit::Pickler pickler([&](const char* data, std::size_t size) { pickle.append(data, size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return bytes;
}

TensorDict read_state_dict(const std::string& path, const std::string& what) {
  try {
    check_regular_file(path);
  } catch (const InputError& e) {
    throw InputError(what + " " + e.what());
  }
  c10::IValue value;
  try {
    caffe2::serialize::PyTorchStreamReader archive(path);
    value = unpickle_archive(archive);
  } catch (const InputError& e) {
    throw InputError(what + " " + path + ": " + e.what());
  } catch (const std::exception& e) {
    throw InputError(what + " " + path + ": not a state dict saved by torch.save: " + clip(torch_message(e), 160));
  }
  return tensors_of(value, what + " " + path);
}

TensorDict read_state_dict_bytes(const std::string& bytes, const std::string& what) {
  c10::IValue value;
  try {
    std::istringstream in(bytes);
    caffe2::serialize::PyTorchStreamReader archive(&in);
    value = unpickle_archive(archive);
  } catch (const InputError& e) {
    throw InputError(what + ": " + e.what());
  } catch (const std::exception& e) {
    throw InputError(what + ": not a dict of tensors saved by torch.save: " + clip(torch_message(e), 160));
  }
  return tensors_of(value, what);
}

}  // namespace rannc
