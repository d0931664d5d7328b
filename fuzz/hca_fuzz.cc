// NCCL_IB_HCA (and NCCL_SOCKET_IFNAME, same syntax) as a job script spells it.
// Contract: HcaFilter::parse() rejects with a non-empty message, or the filter prints to a
// canonical string that parses to an equal filter (parse -> print -> parse), prints the same
// again, and matches devices the same way.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "sluice/core/base/hca_filter.h"

using namespace sluice;

namespace {

bool same(const HcaFilter& a, const HcaFilter& b) {
  if (a.exclude() != b.exclude() || a.exact() != b.exact()) return false;
  if (a.entries().size() != b.entries().size()) return false;
  for (size_t i = 0; i < a.entries().size(); ++i) {
    if (a.entries()[i].name != b.entries()[i].name) return false;
    if (a.entries()[i].port != b.entries()[i].port) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  auto parsed = HcaFilter::parse(spec);
  if (!parsed.is_ok()) {
    FUZZ_CHECK(!parsed.status().message().empty(), "rejection without a reason");
    return 0;
  }
  const HcaFilter& f = parsed.value();
  FUZZ_CHECK(f.entries().size() <= 32, "%zu entries accepted", f.entries().size());
  for (const auto& e : f.entries()) {
    FUZZ_CHECK(!e.name.empty(), "empty device name accepted");
    FUZZ_CHECK(e.port >= -1 && e.port <= 255, "port %d", e.port);
  }
  const std::string text = f.to_string();
  auto again = HcaFilter::parse(text);
  FUZZ_CHECK(again.is_ok(), "canonical form \"%s\" rejected: %s", text.c_str(),
             again.status().message().c_str());
  FUZZ_CHECK(same(f, again.value()), "\"%s\" parses to a different filter", text.c_str());
  FUZZ_CHECK(again.value().to_string() == text, "canonical form not stable");

  // Matching: the same answers from both, for names taken from the filter and a few others.
  std::vector<std::pair<std::string, int>> ports = {{"mlx5_0", 1}, {"rxe0", 1}, {"", -1}};
  for (const auto& e : f.entries()) {
    ports.emplace_back(e.name, e.port);
    ports.emplace_back(e.name + "1", 2);
  }
  for (const auto& [dev, port] : ports)
    FUZZ_CHECK(f.accepts(dev, port) == again.value().accepts(dev, port), "accepts differs");
  FUZZ_CHECK(f.unmatched(ports).size() == again.value().unmatched(ports).size(), "unmatched");
  return 0;
}
