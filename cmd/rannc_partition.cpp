// rannc-partition: the command-line entry point. Parses options, runs a verb, and turns every
// error into one line on stderr and the exit status of CONTRACT.md.
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>
#include <optional>

#include "compiler/inspect.h"
#include "compiler/model.h"
#include "ir/dump.h"
#include "support/error.h"

namespace rannc {
namespace {

struct ModelOptions {
  std::string model_path;
  std::vector<std::string> input_specs;
  std::optional<std::int64_t> batch;

  LoadOptions to_load_options() const {
    LoadOptions options;
    for (const auto& text : input_specs) options.inputs.push_back(parse_input_spec(text));
    options.batch = batch;
    return options;
  }
};

void add_model_options(CLI::App& command, ModelOptions& options) {
  command.add_option("MODEL", options.model_path, "TorchScript (.pt) or ONNX (.onnx) model")->required();
  command.add_option("--input", options.input_specs,
                     "example input NAME:DIMS[:DTYPE], batch dim first, e.g. tokens:8x128:int64 (repeat per input)");
  command.add_option("--batch", options.batch, "batch size for a symbolic batch dim (default: dim 0 of the first --input)");
}

struct InspectOptions {
  ModelOptions model;
  bool json = false;
  bool dump_ir = false;
};

int run_inspect(const InspectOptions& options) {
  Model model = load_model(options.model.model_path, options.model.to_load_options());
  if (options.dump_ir && options.json) {
    std::cout << ir::graph_to_json(model.graph).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (options.dump_ir) {
    std::cout << ir::graph_to_text(model.graph);
  } else if (options.json) {
    std::cout << inspect_json(model).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << inspect_text(model);
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"rannc-partition: plans hybrid pipeline/data-parallel training of a model on a cluster"};
  app.require_subcommand(1);
  InspectOptions inspect;
  auto* inspect_command = app.add_subcommand("inspect", "show the ops, parameters, shapes and FLOPs of a model");
  add_model_options(*inspect_command, inspect.model);
  inspect_command->add_flag("--json", inspect.json, "print JSON (see CONTRACT.md)");
  inspect_command->add_flag("--dump-ir", inspect.dump_ir, "print the lowered IR graph, one op a line (with --json: every value and op as JSON)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    throw InputError(first_line(e.what()) + " (see rannc-partition --help)");
  }
  if (inspect_command->parsed()) return run_inspect(inspect);
  return 0;
}

}  // namespace
}  // namespace rannc

int main(int argc, char** argv) {
  constexpr const char* kPrefix = "rannc-partition: error: ";
  try {
    return rannc::run(argc, argv);
  } catch (const rannc::Error& e) {
    std::cerr << kPrefix << e.what() << "\n";
    return static_cast<int>(e.status());
  } catch (const std::bad_alloc&) {
    std::cerr << kPrefix << "out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << kPrefix << rannc::first_line(e.what()) << "\n";
  }
  return static_cast<int>(rannc::ExitStatus::kBadInput);
}
