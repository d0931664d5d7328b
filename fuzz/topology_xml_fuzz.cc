// hwloc XML topology loading through the topology code's own entry point
// (Topology::load_xml_buffer, what SLUICE_TOPO_FILE and sluice-info --xml use), then every query
// the plugin and sluice-info make of the result.
// Contract: the load rejects with a non-empty message, or the topology answers every query with
// indexes in range: GPUs and NICs numbered in order, every ranking a permutation of the NICs,
// every assignment naming existing NICs.
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "sluice/topology/affinity.h"
#include "sluice/topology/topology.h"

using namespace sluice;
using namespace sluice::topo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;  // larger than any real machine's export; hwloc time only
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  auto loaded = Topology::load_xml_buffer(xml, "<fuzz>");
  if (!loaded.is_ok()) {
    FUZZ_CHECK(!loaded.status().message().empty(), "rejection without a reason");
    return 0;
  }
  const Topology& t = loaded.value();
  const int ngpus = static_cast<int>(t.gpus().size());
  const int nnics = static_cast<int>(t.nics().size());
  for (int g = 0; g < ngpus; ++g) {
    FUZZ_CHECK(t.gpus()[g].index == g, "GPU %d has index %d", g, t.gpus()[g].index);
    FUZZ_CHECK(t.find_gpu(t.gpus()[g].bus_id) == g, "find_gpu(%s)", t.gpus()[g].bus_id.c_str());
  }
  std::vector<std::string> names;
  for (int n = 0; n < nnics; ++n) {
    const Nic& nic = t.nics()[n];
    FUZZ_CHECK(nic.index == n, "NIC %d has index %d", n, nic.index);
    FUZZ_CHECK(nic.adapter >= -1 && nic.adapter < t.adapter_count(), "adapter %d", nic.adapter);
    FUZZ_CHECK(t.find_nic(nic.name) >= 0, "find_nic(%s)", nic.name.c_str());
    t.locality_of_nic(n);
    names.push_back(nic.name);
  }
  for (int g = 0; g < ngpus; ++g) {
    for (int n = 0; n < nnics; ++n) {
      const PairInfo p = t.classify(g, n);
      FUZZ_CHECK(path_class_name(p.cls) != nullptr, "class");
    }
    const auto ranked = t.ranked_nics(g);
    FUZZ_CHECK(static_cast<int>(ranked.size()) == nnics, "ranking of %zu NICs, have %d",
               ranked.size(), nnics);
    std::vector<bool> seen(nnics, false);
    for (const RankedNic& r : ranked) {
      FUZZ_CHECK(r.nic >= 0 && r.nic < nnics && !seen[r.nic], "ranked NIC %d", r.nic);
      seen[r.nic] = true;
    }
    FUZZ_CHECK(t.nearest_nics(g).size() <= ranked.size(), "nearest");
  }
  for (const GpuAssignment& a : t.assign()) {
    FUZZ_CHECK(a.gpu >= 0 && a.gpu < ngpus, "assigned GPU %d", a.gpu);
    for (int n : a.nics) FUZZ_CHECK(n >= 0 && n < nnics, "assigned NIC %d", n);
  }
  // The NIC order the plugin asks for, with this machine's first GPU (or none).
  AffinityRequest req;
  if (ngpus > 0) req.gpu_bus_id = t.gpus()[0].bus_id;
  names.push_back("rxe0");
  const AffinityOrder order = order_nics(t, names, req);
  FUZZ_CHECK(order.nics.size() == names.size(), "order_nics lost or added NICs");
  FUZZ_CHECK(!t.to_dot().empty(), "empty graph");
  return 0;
}
