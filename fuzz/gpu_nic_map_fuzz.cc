// SLUICE_GPU_NIC_MAP (and SLUICE_NIC_AFFINITY) as a job script spells them.
// Contract: parse_gpu_nic_map() rejects with a non-empty message naming the variable, or the map
// prints to a canonical string that parses to the same map (parse -> print -> parse) and prints
// the same again; resolving against a machine's GPUs and NICs either succeeds with every entry
// resolved or fails with a message.
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "sluice/topology/affinity.h"

using namespace sluice;
using namespace sluice::topo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto mode = parse_affinity_mode(text);
  if (!mode.is_ok())
    FUZZ_CHECK(!mode.status().message().empty(), "affinity mode rejected without a reason");

  auto parsed = parse_gpu_nic_map(text);
  if (!parsed.is_ok()) {
    const std::string msg = parsed.status().message();
    FUZZ_CHECK(msg.find("SLUICE_GPU_NIC_MAP") != std::string::npos, "error names no variable");
    return 0;
  }
  const GpuNicMap& map = parsed.value();
  for (const auto& e : map.entries) {
    FUZZ_CHECK(e.gpu_index >= 0 || !e.gpu_bus_id.empty(), "entry %s has no GPU", e.gpu.c_str());
    FUZZ_CHECK(!e.nics.empty(), "entry %s has no NIC", e.gpu.c_str());
    for (const std::string& nic : e.nics) {
      const auto colon = nic.find(':');
      if (colon == std::string::npos) continue;
      const std::string port = nic.substr(colon + 1);  // verbs port numbers are 1..255
      const bool digits = !port.empty() && port.size() <= 6 &&
                          port.find_first_not_of("0123456789") == std::string::npos;
      FUZZ_CHECK(digits && std::stoi(port) >= 1 && std::stoi(port) <= 255,
                 "NIC %s: port out of range accepted", nic.c_str());
    }
    if (!e.gpu_bus_id.empty())
      FUZZ_CHECK(normalize_pci_bus_id(e.gpu_bus_id) == e.gpu_bus_id, "bus id not normalized");
  }
  const std::string canon = map.to_string();
  auto again = parse_gpu_nic_map(canon);
  FUZZ_CHECK(again.is_ok(), "canonical form \"%s\" rejected: %s", canon.c_str(),
             again.status().message().c_str());
  FUZZ_CHECK(again.value().to_string() == canon, "canonical form not stable: \"%s\"",
             canon.c_str());
  FUZZ_CHECK(again.value().entries.size() == map.entries.size(), "entry count changed");
  for (size_t i = 0; i < map.entries.size(); ++i) {
    const auto& a = map.entries[i];
    const auto& b = again.value().entries[i];
    FUZZ_CHECK(a.gpu_index == b.gpu_index && a.gpu_bus_id == b.gpu_bus_id && a.nics == b.nics,
               "entry %zu differs after the round trip", i);
  }

  // Resolve against a machine with two GPUs and three NICs.
  GpuNicMap resolved = map;
  const std::vector<std::string> gpus = {"0000:1b:00.0", "0001:3d:00.0"};
  const std::vector<std::string> nics = {"mlx5_0", "mlx5_1:1", "rxe0"};
  const Status st = resolve_gpu_nic_map(&resolved, gpus, nics);
  if (!st.is_ok()) {
    FUZZ_CHECK(st.message().find("SLUICE_GPU_NIC_MAP") != std::string::npos, "unnamed error");
    return 0;
  }
  for (const auto& e : resolved.entries) {
    FUZZ_CHECK(e.gpu_index >= 0 && e.gpu_index < static_cast<int>(gpus.size()), "index %d",
               e.gpu_index);
    FUZZ_CHECK(e.gpu_bus_id == normalize_pci_bus_id(gpus[e.gpu_index]), "bus id mismatch");
    FUZZ_CHECK(resolved.find(e.gpu_index, "") == &e, "find by index");
  }
  return 0;
}
