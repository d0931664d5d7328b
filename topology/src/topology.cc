#include "sluice/topology/topology.h"

#include <hwloc.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sluice/core/base/log.h"
#include "topology_internal.h"

namespace sluice::topo {

const char* path_class_name(PathClass c) {
  switch (c) {
    case PathClass::kPIX:
      return "PIX";
    case PathClass::kPXB:
      return "PXB";
    case PathClass::kPHB:
      return "PHB";
    case PathClass::kNODE:
      return "NODE";
    case PathClass::kSYS:
      return "SYS";
    case PathClass::kUnknown:
      break;
  }
  return "unknown";
}

namespace {

// hwloc's XML import stores the bridge and OS-device type enums from numbers without a range
// check, so a corrupt or hostile XML file can hold values outside the enum. Read them as integers:
// loading an out-of-range enum value is undefined behaviour (UBSan found it through the fuzzer).
template <typename Enum>
auto enum_bits(const Enum& e) {
  std::underlying_type_t<Enum> v;
  static_assert(sizeof v == sizeof e);
  std::memcpy(&v, &e, sizeof v);
  return v;
}

}  // namespace

// Shared with topology_rank.cc and topology_dot.cc (topology_internal.h).
namespace detail {

std::string format_bus_id(unsigned domain, unsigned bus, unsigned dev, unsigned func) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, dev, func);
  return buf;
}

std::string pci_bus_id(hwloc_obj_t o) {
  const auto& p = o->attr->pcidev;
  return format_bus_id(p.domain, p.bus, p.dev, p.func);
}

bool is_host_bridge(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE &&
         enum_bits(o->attr->bridge.upstream_type) == HWLOC_OBJ_BRIDGE_HOST;
}

// Number of objects between o and the root.
int obj_depth_from_root(hwloc_obj_t o) {
  int d = 0;
  for (hwloc_obj_t p = o->parent; p != nullptr; p = p->parent) ++d;
  return d;
}

hwloc_obj_t package_of(hwloc_obj_t o) {
  for (hwloc_obj_t p = o; p != nullptr; p = p->parent)
    if (p->type == HWLOC_OBJ_PACKAGE) return p;
  return nullptr;
}

hwloc_obj_t non_io_ancestor(hwloc_obj_t o) {
  hwloc_obj_t p = o;
  while (p != nullptr && (p->type == HWLOC_OBJ_BRIDGE || p->type == HWLOC_OBJ_PCI_DEVICE ||
                          p->type == HWLOC_OBJ_OS_DEVICE || p->type == HWLOC_OBJ_MISC))
    p = p->parent;
  return p;
}

}  // namespace detail

using namespace detail;

namespace {

bool parse_hex(std::string_view s, unsigned long max, unsigned long* out) {
  if (s.empty() || s.size() > 8) return false;
  unsigned long v = 0;
  for (char ch : s) {
    int d;
    if (ch >= '0' && ch <= '9')
      d = ch - '0';
    else if (ch >= 'a' && ch <= 'f')
      d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F')
      d = ch - 'A' + 10;
    else
      return false;
    v = v * 16 + static_cast<unsigned long>(d);
  }
  if (v > max) return false;
  *out = v;
  return true;
}

std::vector<int> bitmap_to_vector(hwloc_const_bitmap_t b) {
  std::vector<int> out;
  if (b == nullptr || hwloc_bitmap_iszero(b) || hwloc_bitmap_weight(b) < 0) return out;
  int i;
  hwloc_bitmap_foreach_begin(i, b) {
    out.push_back(i);
  }
  hwloc_bitmap_foreach_end();
  return out;
}

std::string info_or_empty(hwloc_obj_t o, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(o, name);
  return v ? v : "";
}

bool is_openfabrics_osdev(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_OS_DEVICE &&
         enum_bits(o->attr->osdev.type) == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

bool is_gpu_pci(hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_PCI_DEVICE) return false;
  const auto& p = o->attr->pcidev;
  // 0x0302 3D controller, 0x0300 VGA. NVSwitches are 10de too, with class 0x0680 (or 0x0000).
  return p.vendor_id == 0x10de && (p.class_id == 0x0302 || p.class_id == 0x0300);
}

int single_numa(hwloc_topology_t topo, hwloc_obj_t locality) {
  if (locality == nullptr || locality->nodeset == nullptr) return -1;
  if (hwloc_bitmap_weight(locality->nodeset) != 1) return -1;
  int idx = hwloc_bitmap_first(locality->nodeset);
  hwloc_obj_t n = hwloc_get_numanode_obj_by_os_index(topo, static_cast<unsigned>(idx));
  return n ? static_cast<int>(n->os_index) : idx;
}

std::string read_file_trimmed(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::string s;
  std::getline(f, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<int> parse_cpulist(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    auto dash = part.find('-');
    try {
      if (dash == std::string::npos) {
        out.push_back(std::stoi(part));
      } else {
        int a = std::stoi(part.substr(0, dash)), b = std::stoi(part.substr(dash + 1));
        for (int i = a; i <= b && i - a < 65536; ++i) out.push_back(i);
      }
    } catch (...) {
      return {};
    }
  }
  return out;
}

}  // namespace

std::string normalize_pci_bus_id(std::string_view text) {
  // [domain:]bus:dev.func
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ':') {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (parts.size() == 2) parts.insert(parts.begin(), std::string_view("0"));
  if (parts.size() != 3) return "";
  auto dot = parts[2].find('.');
  if (dot == std::string_view::npos) return "";
  unsigned long dom, bus, dev, fn;
  if (!parse_hex(parts[0], 0xffffffff, &dom) || !parse_hex(parts[1], 0xff, &bus) ||
      !parse_hex(parts[2].substr(0, dot), 0x1f, &dev) ||
      !parse_hex(parts[2].substr(dot + 1), 7, &fn))
    return "";
  return format_bus_id(static_cast<unsigned>(dom), static_cast<unsigned>(bus),
                       static_cast<unsigned>(dev), static_cast<unsigned>(fn));
}

bool Nic::maybe_active() const {
  if (port_states.empty()) return true;
  return std::any_of(port_states.begin(), port_states.end(), [](int s) { return s == 4; });
}

void Topology::Impl::discover() {
  packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);

  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    NumaNode nn;
    nn.os_index = static_cast<int>(n->os_index);
    hwloc_obj_t pkg = package_of(n);
    nn.package = pkg ? static_cast<int>(pkg->logical_index) : -1;
    nn.cpus = bitmap_to_vector(n->cpuset);
    nn.local_memory = n->attr ? n->attr->numanode.local_memory : 0;
    numa.push_back(std::move(nn));
  }
  std::sort(numa.begin(), numa.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });

  auto fill_locality = [&](hwloc_obj_t dev, int* numa_node, std::vector<int>* cpus) {
    hwloc_obj_t loc = non_io_ancestor(dev);
    *numa_node = single_numa(topo, loc);
    *cpus = loc ? bitmap_to_vector(loc->cpuset) : std::vector<int>{};
  };

  // GPUs: PCI devices 10de with class 0302/0300, in bus-id order.
  std::vector<hwloc_obj_t> g;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o != nullptr;
       o = hwloc_get_next_pcidev(topo, o))
    if (is_gpu_pci(o)) g.push_back(o);
  auto pci_key = [](hwloc_obj_t o) {
    const auto& p = o->attr->pcidev;
    return std::make_tuple(p.domain, p.bus, p.dev, p.func);
  };
  std::sort(g.begin(), g.end(),
            [&](hwloc_obj_t a, hwloc_obj_t b) { return pci_key(a) < pci_key(b); });
  for (hwloc_obj_t o : g) {
    Gpu gpu;
    gpu.index = static_cast<int>(gpus.size());
    gpu.bus_id = pci_bus_id(o);
    gpu.vendor_id = o->attr->pcidev.vendor_id;
    gpu.device_id = o->attr->pcidev.device_id;
    gpu.class_id = o->attr->pcidev.class_id;
    gpu.link_speed_gbps = o->attr->pcidev.linkspeed;
    for (hwloc_obj_t c = o->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      gpu.os_devices.push_back(c->name);
      if (gpu.name.empty()) gpu.name = info_or_empty(c, "GPUModel");
    }
    if (gpu.name.empty()) gpu.name = info_or_empty(o, "PCIDevice");
    fill_locality(o, &gpu.numa_node, &gpu.cpus);
    gpus.push_back(std::move(gpu));
    gpu_obj.push_back(o);
  }

  // NICs: OpenFabrics OS devices.
  std::vector<hwloc_obj_t> n;
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o != nullptr;
       o = hwloc_get_next_osdev(topo, o))
    if (is_openfabrics_osdev(o) && o->name != nullptr) n.push_back(o);
  auto pci_parent = [](hwloc_obj_t o) -> hwloc_obj_t {
    return (o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE) ? o->parent : nullptr;
  };
  std::sort(n.begin(), n.end(), [&](hwloc_obj_t a, hwloc_obj_t b) {
    hwloc_obj_t pa = pci_parent(a), pb = pci_parent(b);
    if ((pa == nullptr) != (pb == nullptr)) return pa != nullptr;
    if (pa && pb && pci_key(pa) != pci_key(pb)) return pci_key(pa) < pci_key(pb);
    return std::string_view(a->name) < std::string_view(b->name);
  });
  for (hwloc_obj_t o : n) {
    Nic nic;
    nic.index = static_cast<int>(nics.size());
    nic.name = o->name;
    hwloc_obj_t p = pci_parent(o);
    if (p) {
      nic.bus_id = pci_bus_id(p);
      nic.vendor_id = p->attr->pcidev.vendor_id;
      nic.device_id = p->attr->pcidev.device_id;
      nic.class_id = p->attr->pcidev.class_id;
      nic.link_speed_gbps = p->attr->pcidev.linkspeed;
      nic.model = info_or_empty(p, "PCIDevice");
      fill_locality(p, &nic.numa_node, &nic.cpus);
    }
    nic.node_guid = info_or_empty(o, "NodeGUID");
    nic.sys_image_guid = info_or_empty(o, "SysImageGUID");
    for (int port = 1; port <= 64; ++port) {
      std::string key = "Port" + std::to_string(port) + "State";
      const char* v = hwloc_obj_get_info_by_name(o, key.c_str());
      if (v == nullptr) break;
      nic.port_states.push_back(std::atoi(v));
    }
    nics.push_back(std::move(nic));
    nic_obj.push_back(o);
    nic_pci.push_back(p);
  }

  // Adapters: functions in one PCI slot (domain:bus:dev), or sharing a SysImageGUID, are one card.
  std::vector<int> parent(nics.size());
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return parent[x] == x ? x : parent[x] = find(parent[x]);
  };
  for (size_t i = 0; i < nics.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      bool same = false;
      if (nic_pci[i] && nic_pci[j]) {
        const auto& a = nic_pci[i]->attr->pcidev;
        const auto& b = nic_pci[j]->attr->pcidev;
        same = a.domain == b.domain && a.bus == b.bus && a.dev == b.dev;
      }
      const auto& gi = nics[i].sys_image_guid;
      if (!gi.empty() && gi != "0000:0000:0000:0000" && gi == nics[j].sys_image_guid) same = true;
      if (same) parent[find(static_cast<int>(i))] = find(static_cast<int>(j));
    }
  }
  std::map<int, int> adapter_id;
  for (size_t i = 0; i < nics.size(); ++i) {
    int root = find(static_cast<int>(i));
    auto it = adapter_id.find(root);
    if (it == adapter_id.end())
      it = adapter_id.emplace(root, static_cast<int>(adapter_id.size())).first;
    nics[i].adapter = it->second;
  }
  adapters = static_cast<int>(adapter_id.size());
}

namespace {

Result<hwloc_topology_t> init_topology() {
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0)
    return errno_status(Code::kSystemError, "hwloc_topology_init", errno);
  // hwloc's default keeps no PCI objects at all, for XML input too.
  if (hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL) != 0) {
    hwloc_topology_destroy(t);
    return Status(Code::kSystemError, "hwloc_topology_set_io_types_filter failed");
  }
  return t;
}

// hwloc 2.9's XML importer dereferences NULL (hwloc_bitmap_compare_first) for an object with a
// cpuset but no complete_cpuset; hwloc's own exports always write both, and both nodesets. Found
// by the topology_xml fuzz target from a one-byte change to a valid file
// (fuzz/corpus/topology_xml/hwloc-segv-no-complete-cpuset.xml). Such a file is refused before
// hwloc reads it.
Status check_object_sets(std::string_view xml, const std::string& source) {
  // attribute `name` in an element's text: preceded by whitespace, followed by '='
  auto has = [](std::string_view tag, std::string_view name) {
    for (size_t i = tag.find(name); i != std::string_view::npos; i = tag.find(name, i + 1)) {
      const size_t after = i + name.size();
      if (i > 0 && std::isspace(static_cast<unsigned char>(tag[i - 1])) && after < tag.size() &&
          (tag[after] == '=' || std::isspace(static_cast<unsigned char>(tag[after]))))
        return true;
    }
    return false;
  };
  for (size_t pos = xml.find("<object"); pos != std::string_view::npos;
       pos = xml.find("<object", pos + 1)) {
    const std::string_view tag = xml.substr(pos, xml.find('>', pos) - pos);
    for (auto [set, complete] :
         {std::pair{"cpuset", "complete_cpuset"}, std::pair{"nodeset", "complete_nodeset"}}) {
      if (has(tag, set) != has(tag, complete)) {
        return Status(Code::kInvalidArgument, "hwloc XML " + source + ": an object has " +
                                                  (has(tag, set) ? set : complete) + " without " +
                                                  (has(tag, set) ? complete : set) +
                                                  " (corrupt file; hwloc's exports write both)");
      }
    }
  }
  return Status::ok();
}

// One hwloc bitmap as hwloc writes it: "0xf...f" (full), or an optional "0xf...f," (infinite
// above) then comma-separated hex groups, each "0x" and 1 to 16 hex digits, where a zero group
// after the first may be left empty ("0x00000001,,0x00010000").
bool is_hwloc_bitmap(std::string_view v) {
  constexpr std::string_view kFull = "0xf...f";
  if (v == kFull) return true;
  if (v.substr(0, kFull.size() + 1) == "0xf...f,") v.remove_prefix(kFull.size() + 1);
  for (bool first = true;; first = false) {
    const size_t comma = v.find(',');
    const std::string_view group = v.substr(0, comma);
    if (!(group.empty() && !first)) {
      if (group.size() < 3 || group.size() > 18 || group[0] != '0' ||
          (group[1] != 'x' && group[1] != 'X'))
        return false;
      for (char c : group.substr(2))
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    }
    if (comma == std::string_view::npos) return true;
    v.remove_prefix(comma + 1);
  }
}

// The quoted value (' or ") of an attribute whose name ends just before `p` in `text`: optional
// whitespace, '=', optional whitespace, then the quoted value. nullopt when that is not what
// follows.
std::optional<std::string_view> quoted_value_after(std::string_view text, size_t p) {
  while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
  if (p >= text.size() || text[p] != '=') return std::nullopt;
  ++p;
  while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
  if (p >= text.size() || (text[p] != '"' && text[p] != '\'')) return std::nullopt;
  const size_t end = text.find(text[p], p + 1);
  if (end == std::string_view::npos) return std::nullopt;  // unterminated: hwloc refuses it
  return text.substr(p + 1, end - p - 1);
}

// hwloc 2.9 asserts (abort()) in hwloc_bitmap_sscanf on a bitmap that starts with a comma (found by
// the topology_xml fuzz target: complete_cpuset=",x00000008",
// fuzz/corpus/topology_xml/hwloc-assert-bitmap-leading-comma.xml). Every attribute whose name ends
// in "cpuset" or "nodeset" (objects, cpukinds, memattr initiators) must hold a well-formed bitmap
// before hwloc reads the file.
Status check_bitmap_attributes(std::string_view xml, const std::string& source) {
  for (std::string_view suffix : {std::string_view("cpuset"), std::string_view("nodeset")}) {
    for (size_t i = xml.find(suffix); i != std::string_view::npos; i = xml.find(suffix, i + 1)) {
      size_t start = i;  // the attribute name: [A-Za-z_]* before the suffix, after whitespace
      while (start > 0 &&
             (std::isalpha(static_cast<unsigned char>(xml[start - 1])) || xml[start - 1] == '_'))
        --start;
      if (start == 0 || !std::isspace(static_cast<unsigned char>(xml[start - 1]))) continue;
      const std::optional<std::string_view> value = quoted_value_after(xml, i + suffix.size());
      if (value && !is_hwloc_bitmap(*value)) {
        const std::string name(xml.substr(start, i + suffix.size() - start));
        return Status(Code::kInvalidArgument,
                      "hwloc XML " + source + ": attribute " + name + "=\"" +
                          std::string(value->substr(0, 64)) +
                          "\" is not a bitmap as hwloc writes one (0x-prefixed hex groups "
                          "separated by commas; corrupt file)");
      }
    }
  }
  return Status::ok();
}

// The value of attribute `name` in one element's text (from '<' to before '>'), quoted with ' or ";
// nullopt without one.
std::optional<std::string_view> attribute(std::string_view tag, std::string_view name) {
  for (size_t i = tag.find(name); i != std::string_view::npos; i = tag.find(name, i + 1)) {
    if (i == 0 || !std::isspace(static_cast<unsigned char>(tag[i - 1]))) continue;
    if (auto value = quoted_value_after(tag, i + name.size())) return value;
  }
  return std::nullopt;
}

// hwloc 2.9 sets a PU's or NUMA node's os_index as a bit of the machine's sets: without one (hwloc
// then uses UINT_MAX) or with a huge one it allocates and clears 512 MiB (1.2 s outside the
// sanitizers; the topology_xml fuzz target timed out on it,
// fuzz/corpus/topology_xml/hwloc-huge-bitmap-pu-without-os-index.xml). Their os_index must be a
// plain decimal below kMaxOsIndex; the type is read by hwloc's own parser, as its importer does.
constexpr unsigned long kMaxOsIndex = 1ul << 20;
Status check_os_indexes(std::string_view xml, const std::string& source) {
  for (size_t pos = xml.find("<object"); pos != std::string_view::npos;
       pos = xml.find("<object", pos + 1)) {
    const std::string_view tag = xml.substr(pos, xml.find('>', pos) - pos);
    const std::optional<std::string_view> type = attribute(tag, "type");
    if (!type) continue;  // hwloc refuses an object without a type
    if (type->find('&') != std::string_view::npos)
      return Status(Code::kInvalidArgument, "hwloc XML " + source +
                                                ": an object type written with an XML entity "
                                                "(corrupt file; hwloc writes plain names)");
    hwloc_obj_type_t t{};
    if (hwloc_type_sscanf(std::string(*type).c_str(), &t, nullptr, 0) != 0) continue;
    if (t != HWLOC_OBJ_PU && t != HWLOC_OBJ_NUMANODE) continue;
    const std::optional<std::string_view> index = attribute(tag, "os_index");
    bool ok = index && !index->empty() && index->size() <= 7;
    unsigned long v = 0;
    for (char c : index.value_or(std::string_view()))
      if (std::isdigit(static_cast<unsigned char>(c)))
        v = v * 10 + static_cast<unsigned long>(c - '0');
      else
        ok = false;
    if (!ok || v >= kMaxOsIndex)
      return Status(Code::kInvalidArgument,
                    "hwloc XML " + source + ": a " + std::string(*type) + " object has " +
                        (index ? "os_index=\"" + std::string(index->substr(0, 32)) + "\""
                               : std::string("no os_index")) +
                        " (corrupt file; expected a number below " + std::to_string(kMaxOsIndex) +
                        ")");
  }
  return Status::ok();
}

}  // namespace

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;
Topology::~Topology() = default;

Result<Topology> Topology::load_live() {
  auto t = init_topology();
  if (!t.is_ok()) return t.status();
  auto impl = std::make_unique<Impl>();
  impl->topo = t.value();
  impl->live = true;
  impl->source = "live";
  // I/O discovery on a live machine: keep only important PCI objects (the full tree can be large).
  hwloc_topology_set_io_types_filter(impl->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(impl->topo) != 0)
    return errno_status(Code::kSystemError, "hwloc_topology_load (live machine)", errno);
  impl->discover();
  return Topology(std::move(impl));
}

Result<Topology> Topology::load_xml_buffer(std::string_view xml, std::string source) {
  if (xml.empty()) return Status(Code::kInvalidArgument, "hwloc XML " + source + " is empty");
  if (xml.size() > static_cast<size_t>(INT_MAX))
    return Status(Code::kInvalidArgument, "hwloc XML " + source + " is too large");
  SLUICE_RETURN_IF_ERROR(check_object_sets(xml, source));
  SLUICE_RETURN_IF_ERROR(check_bitmap_attributes(xml, source));
  SLUICE_RETURN_IF_ERROR(check_os_indexes(xml, source));
  auto t = init_topology();
  if (!t.is_ok()) return t.status();
  auto impl = std::make_unique<Impl>();
  impl->topo = t.value();
  impl->source = std::move(source);
  // The buffer must be NUL-terminated for hwloc's parsers.
  std::string copy(xml);
  copy.push_back('\0');
  // A failed set_xml*() makes hwloc_topology_load() silently fall back to HWLOC_XMLFILE or to the
  // live machine: check it, and never call load after a failure.
  if (hwloc_topology_set_xmlbuffer(impl->topo, copy.data(), static_cast<int>(copy.size())) != 0)
    return Status(Code::kInvalidArgument,
                  "hwloc cannot parse XML topology " + impl->source + " (not hwloc XML v1/v2?)");
  if (hwloc_topology_load(impl->topo) != 0)
    return errno_status(Code::kInvalidArgument, "hwloc_topology_load(" + impl->source + ")", errno);
  impl->discover();
  // One PCI function is one GPU and a verbs name is one NIC: a file with two at one bus id or
  // name (found by the topology_xml fuzz target) would make lookups by bus id or name ambiguous.
  std::set<std::string> seen;
  for (const Gpu& g : impl->gpus) {
    // hwloc stores the device and function numbers of pci_busid unchecked (the fuzzer found a GPU
    // at device 0x20): a bus id that does not survive normalisation could never be looked up.
    if (normalize_pci_bus_id(g.bus_id) != g.bus_id)
      return Status(Code::kInvalidArgument, "hwloc XML " + impl->source + " has a GPU at " +
                                                g.bus_id +
                                                ", not a PCI address (device above 1f or "
                                                "function above 7; corrupt file)");
    if (!seen.insert(g.bus_id).second)
      return Status(Code::kInvalidArgument, "hwloc XML " + impl->source + " has two GPUs at " +
                                                g.bus_id + " (corrupt file)");
  }
  seen.clear();
  for (const Nic& n : impl->nics) {
    if (!seen.insert(n.name).second)
      return Status(Code::kInvalidArgument, "hwloc XML " + impl->source +
                                                " has two RDMA devices named " + n.name +
                                                " (corrupt file)");
  }
  return Topology(std::move(impl));
}

Result<Topology> Topology::load_xml_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return Status(Code::kInvalidArgument, "cannot read hwloc XML topology file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status(Code::kInvalidArgument, "error reading '" + path + "'");
  return load_xml_buffer(ss.str(), path);
}

bool Topology::is_live() const {
  return impl_->live;
}
const std::string& Topology::source() const {
  return impl_->source;
}
const std::vector<Gpu>& Topology::gpus() const {
  return impl_->gpus;
}
const std::vector<Nic>& Topology::nics() const {
  return impl_->nics;
}
const std::vector<NumaNode>& Topology::numa_nodes() const {
  return impl_->numa;
}
int Topology::package_count() const {
  return impl_->packages;
}
int Topology::adapter_count() const {
  return impl_->adapters;
}

int Topology::find_gpu(std::string_view bus_id) const {
  std::string norm = normalize_pci_bus_id(bus_id);
  if (norm.empty()) return -1;
  for (const auto& g : impl_->gpus)
    if (g.bus_id == norm) return g.index;
  return -1;
}

int Topology::find_nic(std::string_view name) const {
  for (const auto& n : impl_->nics)
    if (n.name == name) return n.index;
  return -1;
}

DeviceLocality Topology::locality_of_nic(int nic) const {
  DeviceLocality loc;
  if (nic < 0 || nic >= static_cast<int>(impl_->nics.size())) return loc;
  loc.numa_node = impl_->nics[nic].numa_node;
  loc.cpus = impl_->nics[nic].cpus;
  return loc;
}

DeviceLocality Topology::locality_of_ibdev(const std::string& name,
                                           const std::string& sysfs_root) const {
  DeviceLocality loc;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return loc;
  std::string dev_link = sysfs_root + "/class/infiniband/" + name + "/device";
  char resolved[PATH_MAX];
  std::string bus_id;
  if (::realpath(dev_link.c_str(), resolved) != nullptr) {
    std::string path(resolved);
    std::string base = path.substr(path.find_last_of('/') + 1);
    std::string norm = normalize_pci_bus_id(base);
    // A PCI function directory is named by its full bus id ("0000:4d:00.0").
    if (!norm.empty() && base.size() >= 12 && std::count(base.begin(), base.end(), ':') == 2) {
      loc.pci_path = path;
      bus_id = norm;
    }
  }
  int nic = find_nic(name);
  if (nic >= 0 && !impl_->nics[nic].bus_id.empty() &&
      (bus_id.empty() || impl_->nics[nic].bus_id == bus_id)) {
    loc.numa_node = impl_->nics[nic].numa_node;
    loc.cpus = impl_->nics[nic].cpus;
    return loc;
  }
  if (bus_id.empty()) return loc;  // virtual device (rxe, siw) or unknown: unknown locality
  unsigned long dom, bus, dev, fn;
  if (parse_hex(bus_id.substr(0, bus_id.size() - 8), 0xffffffff, &dom) &&
      parse_hex(bus_id.substr(bus_id.size() - 7, 2), 0xff, &bus) &&
      parse_hex(bus_id.substr(bus_id.size() - 4, 2), 0x1f, &dev) &&
      parse_hex(bus_id.substr(bus_id.size() - 1, 1), 7, &fn)) {
    hwloc_obj_t p = hwloc_get_pcidev_by_busid(
        impl_->topo, static_cast<unsigned>(dom), static_cast<unsigned>(bus),
        static_cast<unsigned>(dev), static_cast<unsigned>(fn));
    if (p != nullptr) {
      hwloc_obj_t l = non_io_ancestor(p);
      loc.numa_node = single_numa(impl_->topo, l);
      loc.cpus = l ? bitmap_to_vector(l->cpuset) : std::vector<int>{};
      return loc;
    }
  }
  // Not in hwloc's tree (filtered out?): sysfs.
  std::string numa =
      read_file_trimmed(sysfs_root + "/class/infiniband/" + name + "/device/numa_node");
  if (!numa.empty()) {
    try {
      loc.numa_node = std::stoi(numa);
    } catch (...) {
      loc.numa_node = -1;
    }
    if (loc.numa_node < 0) loc.numa_node = -1;
  }
  loc.cpus = parse_cpulist(
      read_file_trimmed(sysfs_root + "/class/infiniband/" + name + "/device/local_cpulist"));
  return loc;
}

std::vector<int> Topology::current_cpu_binding() const {
  if (!impl_->live) return {};
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  std::vector<int> out;
  if (set != nullptr && hwloc_get_cpubind(impl_->topo, set, HWLOC_CPUBIND_PROCESS) == 0)
    out = bitmap_to_vector(set);
  hwloc_bitmap_free(set);
  return out;
}

}  // namespace sluice::topo
