// Reading untrusted files (support/input_file.h) and writing outputs (support/atomic_file.h):
// nothing recurses without bound, nothing reads forever, nothing is left half-written.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "support/atomic_file.h"
#include "support/error.h"
#include "support/input_file.h"

using namespace rannc;
using nlohmann::json;
using Catch::Contains;
using Catch::StartsWith;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() : path(std::filesystem::temp_directory_path() / ("rannc_input_file_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A value nested `levels` deep, built without recursion.
json nested(int levels) {
  json value = json::array();
  for (int i = 0; i < levels; ++i) value = json::array({std::move(value)});
  return value;
}

}  // namespace

TEST_CASE("JSON nested too deep is refused before parsing", "[input_file]") {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(input_error([&] { check_json_depth(deep, "p.json"); }) == "p.json: JSON nested deeper than 128 levels (at byte 128)");
  CHECK_NOTHROW(check_json_depth(std::string(128, '[') + std::string(128, ']'), "p.json"));
  // Brackets inside strings do not count, escaped quotes do not end them.
  CHECK_NOTHROW(check_json_depth("{\"a\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}", "p.json"));
}

TEST_CASE("values are quoted short, however deep or long", "[input_file]") {
  CHECK(json_excerpt(json(5)) == "5");
  CHECK(json_excerpt(json("abc")) == "\"abc\"");
  CHECK(json_excerpt(json::array({1, json::array({2, json::array({3})})})) == "[1, [2, [...]]]");
  CHECK(json_excerpt(json::object({{"a", json::object({{"b", json::object({{"c", 1}})}})}})) == "{\"a\": {\"b\": {...}}}");
  std::string text = json_excerpt(nested(5000));  // dump() of 100000 levels would overflow the stack
  CHECK(text == "[[[...]]]");
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  CHECK(json_excerpt(wide).size() <= 63);
  CHECK_THAT(json_excerpt(wide), StartsWith("[0, 1, 2, 3"));
  CHECK(json_excerpt(json(std::string(1000000, 'x'))).size() == 63);
  CHECK(text_excerpt("a\nb") == "a\\nb");
  CHECK(text_excerpt(std::string(1000, 'y')) == std::string(60, 'y') + "...");
  // Cut on a UTF-8 character boundary.
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xc3\xa9";
  std::string cut = clip(accents, 61);
  CHECK(cut == accents.substr(0, 60) + "...");
}

TEST_CASE("non-finite numbers are found with their path", "[input_file]") {
  json plan = {{"stages", json::array({json::object({{"predicted", {{"fwd_ms", 1.0}}}}),
                                       json::object({{"predicted", {{"fwd_ms", std::numeric_limits<double>::infinity()}}}})})}};
  CHECK(first_non_finite(plan) == std::optional<std::string>("stages[1].predicted.fwd_ms"));
  CHECK(first_non_finite(json::array({1.0, std::nan("")})) == std::optional<std::string>("[1]"));
  plan["stages"][1]["predicted"]["fwd_ms"] = 2.0;
  CHECK(first_non_finite(plan) == std::nullopt);
}

TEST_CASE("only regular files of a bounded size are read", "[input_file]") {
  TempDir dir;
  CHECK(read_regular_file(dir.write("a.json", "{}"), 100, "a test file") == "{}");
  CHECK(input_error([] { read_regular_file("/dev/zero", 100, "a test file"); }) ==
        "/dev/zero: not a regular file (a character device)");
  CHECK(input_error([&] { read_regular_file(dir.path.string(), 100, "a test file"); }) ==
        dir.path.string() + ": not a regular file (a directory)");
  std::string fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(input_error([&] { read_regular_file(fifo, 100, "a test file"); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(input_error([&] { check_regular_file(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(input_error([&] { read_regular_file((dir.path / "none").string(), 100, "a test file"); }) ==
        (dir.path / "none").string() + ": no such file");
  auto big = dir.write("big.json", std::string(2048, ' '));
  CHECK(input_error([&] { read_regular_file(big, 1024, "a test file"); }) ==
        big + ": 2.00 KiB is more than the 1.00 KiB a test file may have");
}

TEST_CASE("atomic writes say why they fail and leave no temporary", "[atomic_file]") {
  TempDir dir;
  auto path = (dir.path / "out.txt").string();
  write_file_atomically(path, "hello");
  CHECK(std::ifstream(path).rdbuf() != nullptr);
  CHECK(input_error([&] { write_file_atomically((dir.path / "no" / "out.txt").string(), "x"); }) ==
        (dir.path / "no" / "out.txt").string() + ": cannot write: No such file or directory");
  CHECK(input_error([&] { write_file_atomically((dir.path / "no" / "out.txt").string(), "x", "the plan"); }) ==
        (dir.path / "no" / "out.txt").string() + ": cannot write the plan: No such file or directory");
  std::filesystem::create_directories(dir.path / "sub");
  CHECK_THAT(input_error([&] { write_file_atomically((dir.path / "sub").string(), "x"); }),
             StartsWith((dir.path / "sub").string() + ": cannot write: "));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) files += entry.is_regular_file();
  CHECK(files == 1);  // out.txt only: no temporary left behind

  CHECK_NOTHROW(check_can_write(path, "--report"));
  CHECK(input_error([] { check_can_write("/proc/nonexistent/report.json", "--report"); }) ==
        "--report /proc/nonexistent/report.json: cannot create: No such file or directory");
  CHECK(input_error([&] { check_can_write(dir.path.string(), "--report"); }) == "--report " + dir.path.string() + ": is a directory");
}
