// The configuration table: every knob's value parser, as the environment of a job sets them.
// Input: lines "<k><value>", byte k choosing the knob (k mod the table's size; aliases too), the
// rest of the line its value. Contract: load_config() rejects with a message naming one of the
// variables that were set, or the values load_config reports for the parameters the environment
// set (ParamSource::value, the spelling a user would write) load again to the same values.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "sluice/core/base/config.h"

using namespace sluice;

namespace {

std::vector<std::string> all_names() {
  std::vector<std::string> names;
  for (const ParamDoc& d : param_docs()) {
    names.push_back(d.name);
    for (const auto& a : d.aliases) names.push_back(a);
  }
  return names;
}

Result<Config> load(const std::map<std::string, std::string>& env,
                    std::vector<ParamSource>* sources) {
  return load_config(
      [&](std::string_view name) -> std::optional<std::string> {
        auto it = env.find(std::string(name));
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      sources);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> names = all_names();
  std::map<std::string, std::string> env;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t pos = 0;
  while (pos < in.size()) {
    size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos) nl = in.size();
    const std::string_view line = in.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    const std::string& name = names[static_cast<uint8_t>(line[0]) % names.size()];
    env[name] = std::string(line.substr(1));
  }

  std::vector<ParamSource> sources;
  auto c = load(env, &sources);
  if (!c.is_ok()) {
    const std::string msg = c.status().message();
    bool named = false;
    for (const auto& [name, value] : env) named = named || msg.find(name) != std::string::npos;
    FUZZ_CHECK(named, "error names no variable that was set: %s", msg.c_str());
    return 0;
  }
  // Reported values load again to themselves.
  std::map<std::string, std::string> canon;
  for (const ParamSource& s : sources) {
    FUZZ_CHECK(env.count(s.set_by) == 1, "%s reported as set by %s", s.name.c_str(),
               s.set_by.c_str());
    canon[s.name] = s.value;
  }
  std::vector<ParamSource> again;
  auto c2 = load(canon, &again);
  FUZZ_CHECK(c2.is_ok(), "reported values rejected: %s", c2.status().message().c_str());
  FUZZ_CHECK(again.size() == sources.size(), "%zu parameters, then %zu", sources.size(),
             again.size());
  for (size_t i = 0; i < again.size(); ++i) {
    FUZZ_CHECK(again[i].name == sources[i].name && again[i].value == sources[i].value,
               "%s=\"%s\" re-parses to \"%s\"", sources[i].name.c_str(), sources[i].value.c_str(),
               again[i].value.c_str());
  }
  return 0;
}
