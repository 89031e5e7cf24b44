// --help of both tools: one "usage:" line written for people (CLI11's own usage line lists every
// option as [OPTIONS] and, beside a description holding a usage, printed two), option groups, and
// the examples and next step in the footer.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

namespace rannc {

class UsageFormatter : public CLI::Formatter {
 public:
  // The usage of `app`: the text after "usage: ", lines after the first indented to match.
  void set_usage(const CLI::App* app, std::string usage) { usages_[app] = std::move(usage); }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    auto found = usages_.find(app);
    if (found == usages_.end()) return CLI::Formatter::make_usage(app, std::move(name));
    return "usage: " + found->second + "\n";
  }

 private:
  std::map<const CLI::App*, std::string> usages_;
};

}  // namespace rannc
