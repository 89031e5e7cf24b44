// The .pt2 frontend's pure parts (frontends/pt2/exported_program.h): the sympy expression
// evaluator over the str and srepr forms torch.export writes, the ExportedProgram reader's one-line
// errors naming the field, and the schema's dtype numbering.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "frontends/pt2/exported_program.h"
#include "support/error.h"

using nlohmann::json;
using rannc::InputError;
namespace pt2 = rannc::pt2;

namespace {

const std::map<std::string, std::int64_t> kS0 = {{"s0", 6}};
const std::map<std::string, std::int64_t> kS0S1 = {{"s0", 6}, {"s1", 10}};
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

std::string srepr_symbol(const std::string& name) { return "Symbol('" + name + "', positive=True, integer=True)"; }

}  // namespace

TEST_CASE("pt2 expressions: srepr forms as torch.export writes them", "[pt2]") {
  CHECK(pt2::evaluate_expr(srepr_symbol("s0"), kS0) == 6);
  CHECK(pt2::evaluate_expr("Symbol(\"s0\", integer=True)", kS0) == 6);
  CHECK(pt2::evaluate_expr("Integer(7)", {}) == 7);
  CHECK(pt2::evaluate_expr("Integer(-7)", {}) == -7);
  CHECK(pt2::evaluate_expr("Mul(Integer(2), " + srepr_symbol("s0") + ")", kS0) == 12);
  CHECK(pt2::evaluate_expr("Add(Mul(Integer(2), " + srepr_symbol("s0") + "), Integer(1))", kS0) == 13);
  CHECK(pt2::evaluate_expr("Add(" + srepr_symbol("s0") + ", " + srepr_symbol("s1") + ", Integer(-3))", kS0S1) == 13);
  CHECK(pt2::evaluate_expr("Pow(" + srepr_symbol("s0") + ", Integer(2))", kS0) == 36);
  CHECK(pt2::evaluate_expr("FloorDiv(" + srepr_symbol("s1") + ", Integer(4))", kS0S1) == 2);
  CHECK(pt2::evaluate_expr("CeilDiv(" + srepr_symbol("s1") + ", Integer(4))", kS0S1) == 3);
  CHECK(pt2::evaluate_expr("Mod(" + srepr_symbol("s1") + ", Integer(4))", kS0S1) == 2);
  CHECK(pt2::evaluate_expr("PythonMod(" + srepr_symbol("s1") + ", Integer(4))", kS0S1) == 2);
  CHECK(pt2::evaluate_expr("CleanDiv(" + srepr_symbol("s1") + ", Integer(5))", kS0S1) == 2);
  CHECK_FALSE(pt2::evaluate_expr("CleanDiv(" + srepr_symbol("s1") + ", Integer(4))", kS0S1));  // not exact
  CHECK(pt2::evaluate_expr("Max(" + srepr_symbol("s0") + ", Integer(8), Integer(1))", kS0) == 8);
  CHECK(pt2::evaluate_expr("Min(" + srepr_symbol("s0") + ", Integer(8))", kS0) == 6);
  CHECK(pt2::evaluate_expr("Max(Integer(1), Mul(Integer(-1), " + srepr_symbol("s0") + "), evaluate=False)", kS0) == 1);
  CHECK(pt2::evaluate_expr("FloorToInt(" + srepr_symbol("s0") + ")", kS0) == 6);
  CHECK(pt2::evaluate_expr("TruncToInt(s0)", kS0) == 6);
  CHECK(pt2::evaluate_expr("Abs(Add(" + srepr_symbol("s0") + ", Integer(-10)))", kS0) == 4);
  CHECK_FALSE(pt2::evaluate_expr("Abs(-9223372036854775807 - 1)", {}));
  CHECK(pt2::evaluate_expr("One()", {}) == 1);
  CHECK(pt2::evaluate_expr("NegativeOne()", {}) == -1);
}

TEST_CASE("pt2 expressions: str forms", "[pt2]") {
  CHECK(pt2::evaluate_expr("s0", kS0) == 6);
  CHECK(pt2::evaluate_expr("2*s0 + 1", kS0) == 13);
  CHECK(pt2::evaluate_expr("  2 * s0  -  1 ", kS0) == 11);
  CHECK(pt2::evaluate_expr("s0*s1 - s0", kS0S1) == 54);
  CHECK(pt2::evaluate_expr("-s0 + 10", kS0) == 4);
  CHECK(pt2::evaluate_expr("s0**2", kS0) == 36);
  CHECK(pt2::evaluate_expr("(s0 + s1)*2", kS0S1) == 32);
  CHECK(pt2::evaluate_expr("s1 // 4", kS0S1) == 2);
  CHECK(pt2::evaluate_expr("s1 % 4", kS0S1) == 2);
  CHECK(pt2::evaluate_expr("FloorDiv(s1, 4)", kS0S1) == 2);
  CHECK(pt2::evaluate_expr("Max(1, s0 - 10)", kS0) == 1);
  CHECK(pt2::evaluate_expr("Min(s0, s1)", kS0S1) == 6);
  // Python's floor semantics, not C++'s truncation.
  CHECK(pt2::evaluate_expr("FloorDiv(-7, 2)", {}) == -4);
  CHECK(pt2::evaluate_expr("Mod(-7, 2)", {}) == 1);
  CHECK(pt2::evaluate_expr("Mod(7, -2)", {}) == -1);
  CHECK(pt2::evaluate_expr("(-7) // 2", {}) == -4);
}

TEST_CASE("pt2 expressions: what they cannot evaluate is nullopt", "[pt2]") {
  CHECK_FALSE(pt2::evaluate_expr("s0", {}));                  // unbound
  CHECK_FALSE(pt2::evaluate_expr("s0 + s2", kS0));            // one of two unbound
  CHECK_FALSE(pt2::evaluate_expr("FloorDiv(s0, 0)", kS0));    // division by zero
  CHECK_FALSE(pt2::evaluate_expr("Mod(s0, 0)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("CleanDiv(s0, 0)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("s0 / 2", kS0));             // true division: not an integer
  CHECK_FALSE(pt2::evaluate_expr("Float(2.5)", {}));
  CHECK_FALSE(pt2::evaluate_expr("sqrt(s0)", kS0));           // an unknown function
  CHECK_FALSE(pt2::evaluate_expr("", {}));
  CHECK_FALSE(pt2::evaluate_expr("(s0", kS0));
  CHECK_FALSE(pt2::evaluate_expr("s0)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("Add(s0, ", kS0));
  CHECK_FALSE(pt2::evaluate_expr("Symbol('s0'", kS0));
  CHECK_FALSE(pt2::evaluate_expr("Symbol('s0, integer=True)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("s0 + 1 garbage", kS0));
}

TEST_CASE("pt2 expressions: a Symbol with arguments it does not know stops, never loops", "[pt2]") {
  // Before: a character no rule consumed ('?', '.') kept the argument skipper turning forever.
  CHECK_FALSE(pt2::evaluate_expr("Symbol('s0', ?)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("Symbol('s0', 1.5)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("Symbol('s0', positive=True, @)", kS0));
  CHECK_FALSE(pt2::evaluate_expr("Symbol('s0', positive=True", kS0));
  CHECK(pt2::expr_symbols("Symbol('s0', ?)") == std::vector<std::string>{"s0"});
}

TEST_CASE("pt2 expressions: overflow is nullopt, never wraps or traps", "[pt2]") {
  CHECK(pt2::evaluate_expr("9223372036854775807", {}) == kMax);
  CHECK_FALSE(pt2::evaluate_expr("9223372036854775808", {}));
  CHECK_FALSE(pt2::evaluate_expr("99999999999999999999999999", {}));
  CHECK_FALSE(pt2::evaluate_expr("9223372036854775807 + 1", {}));
  CHECK_FALSE(pt2::evaluate_expr("-9223372036854775807 - 2", {}));
  CHECK_FALSE(pt2::evaluate_expr("s0*s0*s0*s0", {{"s0", std::int64_t{1} << 20}}));
  CHECK_FALSE(pt2::evaluate_expr("Mul(Integer(4611686018427387904), Integer(4611686018427387904))", {}));
  CHECK_FALSE(pt2::evaluate_expr("2**63", {}));
  CHECK(pt2::evaluate_expr("2**62", {}) == std::int64_t{1} << 62);
  CHECK_FALSE(pt2::evaluate_expr("Pow(Integer(2), Integer(-1))", {}));
  CHECK_FALSE(pt2::evaluate_expr("Max(Integer(1), Add(Integer(9223372036854775807), Integer(1)))", {}));
  // INT64_MIN // -1 is 2^63: no int64; x86's idiv traps (SIGFPE) on it, so it must not be tried.
  const std::string min = "(-9223372036854775807 - 1)";
  CHECK(pt2::evaluate_expr(min, {}) == kMin);
  CHECK_FALSE(pt2::evaluate_expr(min + " // -1", {}));
  CHECK_FALSE(pt2::evaluate_expr("FloorDiv(" + min + ", -1)", {}));
  CHECK_FALSE(pt2::evaluate_expr("CleanDiv(" + min + ", -1)", {}));
  CHECK_FALSE(pt2::evaluate_expr("CeilDiv(" + min + ", -1)", {}));
  CHECK(pt2::evaluate_expr("Mod(" + min + ", -1)", {}) == 0);
  CHECK(pt2::evaluate_expr(min + " % -1", {}) == 0);
  CHECK_FALSE(pt2::evaluate_expr("-" + min, {}));
  CHECK(pt2::evaluate_expr("s0", {{"s0", kMin}}) == kMin);
}

TEST_CASE("pt2 expressions: deep nesting is nullopt, without a stack overflow", "[pt2]") {
  auto nested = [](int depth, const std::string& open, const std::string& inner, const std::string& close) {
    std::string text;
    for (int i = 0; i < depth; ++i) text += open;
    text += inner;
    for (int i = 0; i < depth; ++i) text += close;
    return text;
  };
  // What real models write nests a few levels; dozens still evaluate.
  CHECK(pt2::evaluate_expr(nested(40, "(", "s0", ")"), kS0) == 6);
  CHECK(pt2::evaluate_expr(nested(40, "Add(Integer(1), ", "s0", ")"), kS0) == 46);
  for (int depth : {1000, 100000}) {
    CAPTURE(depth);
    CHECK_FALSE(pt2::evaluate_expr(nested(depth, "(", "s0", ")"), kS0));
    CHECK_FALSE(pt2::evaluate_expr(nested(depth, "Add(Integer(1), ", "s0", ")"), kS0));
    CHECK_FALSE(pt2::evaluate_expr(nested(depth, "-", "s0", ""), kS0));
    CHECK_FALSE(pt2::evaluate_expr(nested(depth, "Max(1, ", srepr_symbol("s0"), ")"), kS0));
    CHECK_FALSE(pt2::evaluate_expr(nested(depth, "(", "", ""), kS0));  // unbalanced too
    pt2::expr_symbols(nested(depth, "(", "s0", ")"));                 // returns
  }
}

TEST_CASE("pt2 expressions: the symbols named, and whether a dim is one bare symbol", "[pt2]") {
  CHECK(pt2::expr_symbols("2*s0 + s1 - s0") == std::vector<std::string>{"s0", "s1"});
  CHECK(pt2::expr_symbols("Add(Mul(Integer(2), " + srepr_symbol("s3") + "), " + srepr_symbol("s1") + ")") ==
        std::vector<std::string>{"s3", "s1"});
  CHECK(pt2::expr_symbols("Integer(4)").empty());
  CHECK(pt2::bare_symbol("s0") == std::string("s0"));
  CHECK(pt2::bare_symbol("  s12 ") == std::string("s12"));
  CHECK(pt2::bare_symbol(srepr_symbol("s0")) == std::string("s0"));
  CHECK_FALSE(pt2::bare_symbol("2*s0"));
  CHECK_FALSE(pt2::bare_symbol("s0 + 1"));
  CHECK_FALSE(pt2::bare_symbol("Mul(Integer(2), " + srepr_symbol("s0") + ")"));
  CHECK_FALSE(pt2::bare_symbol("Integer(2)"));
  CHECK_FALSE(pt2::bare_symbol("8"));
  CHECK_FALSE(pt2::bare_symbol(""));
  CHECK_FALSE(pt2::bare_symbol("Symbol('s0', ?)"));
}

namespace {

// The smallest program the reader takes: y = relu(x), x[s0, 4] with s0 the dynamic batch.
json minimal_program() {
  json tensor = {{"dtype", 7},
                 {"sizes", json::array({{{"as_expr", {{"expr_str", "s0"}, {"hint", {{"as_int", 2}}}}}}, {{"as_int", 4}}})},
                 {"requires_grad", false},
                 {"device", {{"type", "cpu"}}},
                 {"strides", json::array({{{"as_int", 4}}, {{"as_int", 1}}})},
                 {"storage_offset", {{"as_int", 0}}},
                 {"layout", 7}};
  json node = {{"target", "torch.ops.aten.relu.default"},
               {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", "x"}}}}}, {"kind", 1}}})},
               {"outputs", json::array({{{"as_tensor", {{"name", "relu"}}}}})},
               {"metadata", {{"stack_trace", "  File \"model.py\", line 12, in forward\n    return x.relu()\n"}}}};
  json graph = {{"inputs", json::array({{{"as_tensor", {{"name", "x"}}}}})},
                {"outputs", json::array({{{"as_tensor", {{"name", "relu"}}}}})},
                {"nodes", json::array({node})},
                {"tensor_values", {{"x", tensor}, {"relu", tensor}}},
                {"sym_int_values", json::object()}};
  json signature = {{"input_specs", json::array({{{"user_input", {{"arg", {{"as_tensor", {{"name", "x"}}}}}}}}})},
                    {"output_specs", json::array({{{"user_output", {{"arg", {{"as_tensor", {{"name", "relu"}}}}}}}}})}};
  return {{"graph_module", {{"graph", graph}, {"signature", signature}, {"module_call_graph", json::array()}}},
          {"opset_version", {{"aten", 10}}},
          {"range_constraints", json::object()},
          {"schema_version", {{"major", 8}, {"minor", 2}}},
          {"verifiers", json::array({"TRAINING"})},
          {"torch_version", "2.6.0"}};
}

// The one-line message parsing `program` throws, "" when it parses.
std::string parse_error(const json& program) {
  try {
    pt2::parse_exported_program(program.dump(), "m.pt2: models/model.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("pt2 program: a minimal program parses", "[pt2]") {
  auto program = pt2::parse_exported_program(minimal_program().dump(), "m.pt2");
  CHECK(program.schema_major == 8);
  CHECK(program.schema_minor == 2);
  CHECK(program.torch_version == "2.6.0");
  CHECK(program.verifiers == std::vector<std::string>{"TRAINING"});
  REQUIRE(program.nodes.size() == 1);
  CHECK(program.nodes[0].target == "torch.ops.aten.relu.default");
  CHECK(program.nodes[0].location == "model.py:12");
  REQUIRE(program.nodes[0].inputs.size() == 1);
  CHECK(program.nodes[0].inputs[0].name == "self");
  CHECK_FALSE(program.nodes[0].inputs[0].keyword);
  REQUIRE(program.tensors.count("x"));
  const auto& x = program.tensors.at("x");
  CHECK(x.dtype == rannc::ir::DType::kFloat32);
  REQUIRE(x.sizes.size() == 2);
  CHECK_FALSE(x.sizes[0].value);
  CHECK(x.sizes[0].expr == "s0");
  CHECK(x.sizes[0].hint == 2);
  CHECK(x.sizes[1].value == 4);
  REQUIRE(program.input_specs.size() == 1);
  CHECK(program.input_specs[0].kind == pt2::InputKind::kUserInput);
  CHECK(program.input_specs[0].arg == "x");
  REQUIRE(program.output_specs.size() == 1);
  CHECK(program.output_specs[0].kind == pt2::OutputKind::kUserOutput);
}

TEST_CASE("pt2 program: every error is one line naming the file and the field", "[pt2]") {
  struct Case {
    const char* what;
    std::function<void(json&)> change;
    const char* field;  // the message must name it
  };
  const std::vector<Case> cases = {
      {"no schema_version", [](json& p) { p.erase("schema_version"); }, "program.schema_version is missing"},
      {"no major", [](json& p) { p["schema_version"].erase("major"); }, "schema_version.major is missing"},
      {"text major", [](json& p) { p["schema_version"]["major"] = "8"; }, "schema_version.major is not an integer"},
      {"newer major", [](json& p) { p["schema_version"]["major"] = 9; }, "schema version 9.2 (this build reads 8.x"},
      {"older major", [](json& p) { p["schema_version"]["major"] = 7; }, "schema version 7.2"},
      {"major 2^32 + 8", [](json& p) { p["schema_version"]["major"] = (std::int64_t{1} << 32) + 8; }, "schema version 4294967304.2"},
      {"negative minor", [](json& p) { p["schema_version"]["minor"] = -1; }, "schema version 8.-1"},
      {"no graph_module", [](json& p) { p.erase("graph_module"); }, "program.graph_module is missing"},
      {"no graph", [](json& p) { p["graph_module"].erase("graph"); }, "graph_module.graph is missing"},
      {"no signature", [](json& p) { p["graph_module"].erase("signature"); }, "graph_module.signature is missing"},
      {"nodes not an array", [](json& p) { p["graph_module"]["graph"]["nodes"] = json::object(); }, "graph.nodes is not an array"},
      {"node without target", [](json& p) { p["graph_module"]["graph"]["nodes"][0].erase("target"); },
       "graph.nodes[0].target is missing"},
      {"node target a number", [](json& p) { p["graph_module"]["graph"]["nodes"][0]["target"] = 3; },
       "graph.nodes[0].target is not a string"},
      {"argument without arg", [](json& p) { p["graph_module"]["graph"]["nodes"][0]["inputs"][0].erase("arg"); },
       "graph.nodes[0].inputs[0].arg is missing"},
      {"empty argument union", [](json& p) { p["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = json::object(); },
       "graph.nodes[0].inputs[0].arg is not a one-key object"},
      {"no tensor_values", [](json& p) { p["graph_module"]["graph"].erase("tensor_values"); }, "graph.tensor_values is missing"},
      {"tensor without dtype", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"].erase("dtype"); },
       "graph.tensor_values.x.dtype is missing"},
      {"dtype a string", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["dtype"] = "float"; },
       "graph.tensor_values.x.dtype is not an integer"},
      {"sizes not an array", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["sizes"] = 4; },
       "graph.tensor_values.x.sizes is not an array"},
      {"negative size", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][1] = {{"as_int", -4}}; },
       "graph.tensor_values.x.sizes[1] is a negative size"},
      {"size 2^64 - 1", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][1] = {{"as_int", ~std::uint64_t{0}}}; },
       "graph.tensor_values.x.sizes[1] is beyond the 64-bit range"},
      {"size a float", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][1] = {{"as_int", 4.5}}; },
       "graph.tensor_values.x.sizes[1] is not an integer"},
      {"size of another kind", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][1] = {{"as_float", 4.0}}; },
       "graph.tensor_values.x.sizes[1] is a 'as_float', not a size"},
      {"expr without expr_str", [](json& p) { p["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"].erase("expr_str"); },
       "graph.tensor_values.x.sizes[0].expr_str is missing"},
      {"input_specs missing", [](json& p) { p["graph_module"]["signature"].erase("input_specs"); }, "signature.input_specs is missing"},
      {"parameter without name", [](json& p) { p["graph_module"]["signature"]["input_specs"][0] = {{"parameter", {{"arg", {{"name", "w"}}}}}}; },
       "signature.input_specs[0].parameter_name is missing"},
      {"user output without arg", [](json& p) { p["graph_module"]["signature"]["output_specs"][0]["user_output"].erase("arg"); },
       "signature.output_specs[0].arg is missing"},
      {"program an array", [](json& p) { p = json::array({1, 2}); }, "program is not an object"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto program = minimal_program();
    c.change(program);
    auto message = parse_error(program);
    CAPTURE(message);
    CHECK(message.rfind("m.pt2: models/model.json: ", 0) == 0);
    CHECK(message.find(c.field) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.size() < 400);
  }
}

TEST_CASE("pt2 program: text that is no JSON, or JSON nested too deep, is one line", "[pt2]") {
  for (std::string text : {std::string(""), std::string("{"), std::string("{\"schema_version\": }"), std::string("\xff\xfe"),
                           std::string(100000, '[') + std::string(100000, ']'),
                           "{\"a\": " + std::string(100000, '{') + std::string(100000, '}') + "}"}) {
    CAPTURE(text.substr(0, 40));
    try {
      pt2::parse_exported_program(text, "m.pt2: serialized_exported_program.json");
      FAIL("parsed");
    } catch (const InputError& e) {
      std::string message = e.what();
      CHECK(message.rfind("m.pt2: serialized_exported_program.json", 0) == 0);
      CHECK(message.find('\n') == std::string::npos);
      CHECK(message.size() < 400);
    }
  }
}

TEST_CASE("pt2 program: a weights config's tensor_meta", "[pt2]") {
  json meta = {{"dtype", 13}, {"sizes", json::array({{{"as_int", 3}}, {{"as_int", 5}}})}, {"requires_grad", true}};
  auto parsed = pt2::parse_tensor_meta(meta, "m.pt2: data/weights/model_weights_config.json: 'w'");
  CHECK(parsed.dtype == rannc::ir::DType::kBFloat16);
  CHECK(parsed.dtype_code == 13);
  CHECK(parsed.requires_grad);
  REQUIRE(parsed.sizes.size() == 2);
  CHECK(parsed.sizes[1].value == 5);
  meta["sizes"][0] = {{"as_int", -1}};
  CHECK_THROWS_WITH(pt2::parse_tensor_meta(meta, "m.pt2: data/weights/model_weights_config.json: 'w'"),
                    Catch::Contains("m.pt2: data/weights/model_weights_config.json: 'w': tensor_meta.sizes[0] is a negative size"));
  CHECK_THROWS_WITH(pt2::parse_tensor_meta(json::array(), "w"), Catch::Contains("tensor_meta is not an object"));
}

TEST_CASE("pt2 dtypes: the schema's ScalarType numbers, which are not c10's", "[pt2]") {
  using rannc::ir::DType;
  const std::vector<std::tuple<int, DType, int>> table = {
      // schema code, IR dtype, c10::ScalarType
      {1, DType::kUInt8, 0},   {2, DType::kInt8, 1},      {3, DType::kInt16, 2},       {4, DType::kInt32, 3},
      {5, DType::kInt64, 4},   {6, DType::kFloat16, 5},   {7, DType::kFloat32, 6},     {8, DType::kFloat64, 7},
      {10, DType::kComplex64, 9}, {11, DType::kComplex128, 10}, {12, DType::kBool, 11}, {13, DType::kBFloat16, 15},
  };
  for (const auto& [code, dtype, c10] : table) {
    CAPTURE(code);
    CHECK(pt2::dtype_from_schema(code) == dtype);
    CHECK(pt2::c10_scalar_type(code) == c10);
  }
  // UNKNOWN, COMPLEXHALF (no IR type), UINT16 and the float8 types (28..32), numbers no schema has.
  for (int code : {0, 9, 14, 27, 28, 29, 30, 31, 32, -1, 1000}) {
    CAPTURE(code);
    CHECK_FALSE(pt2::dtype_from_schema(code));
  }
  CHECK(pt2::c10_scalar_type(9) == 8);  // ComplexHalf: c10 has it, the IR not
  for (int code : {0, 14, 28, 29, -1}) CHECK_FALSE(pt2::c10_scalar_type(code));
}

TEST_CASE("pt2 program: Python's bare -Infinity, Infinity and NaN (masked_fill(mask, -inf)) are read", "[pt2]") {
  auto text = minimal_program().dump();
  const std::string inputs = "\"inputs\":[";
  auto at = text.find(inputs, text.find("\"nodes\":["));  // the node's, not the graph's
  REQUIRE(at != std::string::npos);
  // torch.export writes json.dumps' default: -Infinity, not valid JSON; a string holding the
  // word stays a string.
  text.insert(at + inputs.size(), "{\"name\":\"value\",\"arg\":{\"as_float\":-Infinity}},{\"name\":\"b\",\"arg\":{\"as_floats\":[NaN, 1.5, Infinity]}},"
                                  "{\"name\":\"c\",\"arg\":{\"as_string\":\"-Infinity NaN \\\" Infinity\"}},");
  auto program = pt2::parse_exported_program(text, "m.pt2");
  REQUIRE(program.nodes.size() == 1);
  REQUIRE(program.nodes[0].inputs.size() == 4);
  CHECK(program.nodes[0].inputs[0].arg.kind == "as_float");
  CHECK(program.nodes[0].inputs[0].arg.value == "-Infinity");
  CHECK(program.nodes[0].inputs[1].arg.value == json::array({"NaN", 1.5, "Infinity"}));
  CHECK(program.nodes[0].inputs[2].arg.value == "-Infinity NaN \" Infinity");
  CHECK_THROWS_WITH(pt2::parse_exported_program("{\"a\": Infinityx}", "m.pt2"), Catch::Contains("not valid JSON"));
}
