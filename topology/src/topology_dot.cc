// Topology::to_dot: the machine as Graphviz, for sluice-info --dot; and describe(), the one-line
// name of an hwloc object that the dot labels and PairInfo::lca use.
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "topology_internal.h"

namespace sluice::topo {

using namespace detail;

std::string detail::describe(hwloc_obj_t o) {
  char buf[128];
  if (o->type == HWLOC_OBJ_BRIDGE) {
    if (is_host_bridge(o)) {
      std::snprintf(buf, sizeof buf, "HostBridge %04x:[%02x-%02x]",
                    o->attr->bridge.downstream.pci.domain,
                    o->attr->bridge.downstream.pci.secondary_bus,
                    o->attr->bridge.downstream.pci.subordinate_bus);
    } else {
      const auto& p = o->attr->bridge.upstream.pci;
      std::snprintf(buf, sizeof buf, "PCIBridge %s [%04x:%04x]",
                    format_bus_id(p.domain, p.bus, p.dev, p.func).c_str(), p.vendor_id,
                    p.device_id);
    }
    return buf;
  }
  if (o->type == HWLOC_OBJ_PCI_DEVICE) {
    std::snprintf(buf, sizeof buf, "PCI %s [%04x:%04x]", pci_bus_id(o).c_str(),
                  o->attr->pcidev.vendor_id, o->attr->pcidev.device_id);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%s L#%u", hwloc_obj_type_string(o->type), o->logical_index);
  return buf;
}

std::string Topology::to_dot() const {
  // Keep CPU-side objects down to NUMA nodes, and the I/O objects on the path to a GPU or a NIC.
  std::map<hwloc_obj_t, bool> keep;
  auto mark_up = [&](hwloc_obj_t o) {
    for (hwloc_obj_t p = o; p != nullptr; p = p->parent) keep[p] = true;
  };
  for (hwloc_obj_t o : impl_->gpu_obj) mark_up(o);
  for (size_t i = 0; i < impl_->nic_obj.size(); ++i)
    mark_up(impl_->nic_pci[i] ? impl_->nic_pci[i] : impl_->nic_obj[i]->parent);
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(impl_->topo, HWLOC_OBJ_NUMANODE, nullptr);
       n != nullptr; n = hwloc_get_next_obj_by_type(impl_->topo, HWLOC_OBJ_NUMANODE, n))
    mark_up(n);
  std::map<hwloc_obj_t, int> gpu_of, nic_of;
  for (size_t i = 0; i < impl_->gpu_obj.size(); ++i)
    gpu_of[impl_->gpu_obj[i]] = static_cast<int>(i);
  std::ostringstream os;
  os << "graph sluice_topology {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  auto id = [](hwloc_obj_t o) { return "o" + std::to_string(o->gp_index); };
  auto esc = [](const std::string& s) {
    std::string r;
    for (char c : s) {
      if (c == '"' || c == '\\') r.push_back('\\');
      r.push_back(c);
    }
    return r;
  };
  std::function<void(hwloc_obj_t)> walk = [&](hwloc_obj_t o) {
    std::string label, shape = "box", style = "rounded", color = "black";
    auto git = gpu_of.find(o);
    if (git != gpu_of.end()) {
      const Gpu& g = impl_->gpus[git->second];
      label = "GPU" + std::to_string(g.index) + "\\n" + g.bus_id +
              (g.name.empty() ? "" : "\\n" + esc(g.name));
      style = "filled";
      color = "palegreen";
    } else if (o->type == HWLOC_OBJ_NUMANODE) {
      label = "NUMA P#" + std::to_string(o->os_index);
      shape = "ellipse";
      style = "filled";
      color = "lightyellow";
    } else if (o->type == HWLOC_OBJ_PCI_DEVICE) {
      std::string names;
      for (size_t i = 0; i < impl_->nic_pci.size(); ++i)
        if (impl_->nic_pci[i] == o) names += (names.empty() ? "" : ", ") + impl_->nics[i].name;
      label = (names.empty() ? std::string("PCI") : "NIC " + esc(names)) + "\\n" + pci_bus_id(o);
      style = "filled";
      color = names.empty() ? "white" : "lightblue";
    } else if (o->type == HWLOC_OBJ_BRIDGE) {
      label = esc(describe(o));
      bool hb = is_host_bridge(o);
      shape = hb ? "box" : "box";
      style = hb ? "filled" : "rounded";
      color = hb ? "lightgrey" : "black";
    } else {
      label = esc(describe(o));
      if (o->type == HWLOC_OBJ_PACKAGE) {
        style = "filled";
        color = "wheat";
      }
    }
    if (style == "filled")
      os << "  " << id(o) << " [label=\"" << label << "\", shape=" << shape
         << ", style=filled, fillcolor=\"" << color << "\"];\n";
    else
      os << "  " << id(o) << " [label=\"" << label << "\", shape=" << shape << ", style=" << style
         << "];\n";
    auto visit = [&](hwloc_obj_t c) {
      for (; c != nullptr; c = c->next_sibling) {
        if (!keep.count(c)) continue;
        os << "  " << id(o) << " -- " << id(c) << ";\n";
        walk(c);
      }
    };
    visit(o->memory_first_child);
    visit(o->first_child);
    visit(o->io_first_child);
  };
  walk(hwloc_get_root_obj(impl_->topo));
  // Virtual NICs (no PCI parent) and the assignment.
  for (size_t i = 0; i < impl_->nics.size(); ++i)
    if (impl_->nic_pci[i] == nullptr)
      os << "  v" << i << " [label=\"NIC " << esc(impl_->nics[i].name)
         << "\\n(no PCI: unknown locality)\", shape=box, style=dashed];\n";
  for (const auto& ga : assign()) {
    for (int n : ga.nics) {
      hwloc_obj_t target = impl_->nic_pci[n];
      os << "  " << id(impl_->gpu_obj[ga.gpu]) << " -- "
         << (target ? id(target) : "v" + std::to_string(n)) << " [style=dashed, color=red, label=\""
         << path_class_name(ga.cls) << "\", constraint=false];\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace sluice::topo
