// sluice-info: what Sluice sees on this machine and why it would choose what it chooses.
// RDMA devices (verbs), GPUs, NUMA nodes, the GPU -> NIC table, the GPUDirect decision per NIC,
// the locked-memory limit, and warnings with a one-line fix. --json for scripts, --dot for a
// picture, --topology FILE.xml to read an hwloc XML instead of the live machine.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "info_fusion.h"
#include "info_standby.h"
#include "sluice/core/base/config.h"
#include "sluice/core/base/fabric.h"
#include "sluice/core/base/flow_label.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/verbs.h"
#include "sluice/core/base/verbs_ext.h"
#include "sluice/core/base/version.h"
#include "sluice/core/connect/cm_choice.h"
#include "sluice/core/device/device_info.h"
#include "sluice/gpu/cuda_driver.h"
#include "sluice/gpu/gdr.h"
#include "sluice/topology/affinity.h"
#include "sluice/topology/topology.h"

namespace {

using namespace sluice;
using namespace sluice::topo;

struct Gid {
  int index = 0;
  std::string text;
  std::string type;  // "RoCE v2", "IB/RoCE v1", "" unknown
  GidEntry entry;
};

struct Port {
  int num = 0;
  std::string state;  // ACTIVE, DOWN, ...
  bool active = false;
  std::string link_layer;  // InfiniBand, Ethernet
  double speed_gbps = 0;
  int active_mtu = 0, max_mtu = 0;
  std::vector<Gid> gids;
  std::string chosen;  // "index 3: reason" or "error: ..."
  int chosen_index = -1;
  std::vector<std::pair<std::string, int>> ips;  // IP address, GID index (-1: netdev: IPoIB, iWARP)
  std::string cm, cm_reason;                     // what SLUICE_CM=auto|... picks, and why
  std::string transport;                         // InfiniBand (IB and RoCE), iWARP, ...
};

struct Device {
  std::string name;
  std::string node_guid;
  std::string source;  // "verbs" or "hwloc XML"
  std::vector<Port> ports;
  DeviceLocality loc;
  bool probed = false;  // dma-buf probe ran (live verbs devices only)
  DmabufProbe dmabuf;
  RoProbe ro;    // a registration with IBV_ACCESS_RELAXED_ORDERING
  EceQuery ece;  // a throwaway QP's ibv_query_ece
};

struct Warning {
  std::string what, fix;
};

std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      r += b;
    } else {
      r += static_cast<char>(c);
    }
  }
  return r + "\"";
}

std::vector<Device> list_verbs_devices(const Topology* topo, const Config& cfg,
                                       std::string* error) {
  std::vector<Device> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    *error = std::string("ibv_get_device_list: ") + std::strerror(errno);
    return out;
  }
  const GidPolicy policy = gid_policy(cfg);
  for (int i = 0; i < n; ++i) {
    Device d;
    d.name = ibv_get_device_name(list[i]);
    d.source = "verbs";
    char guid[32];
    uint64_t g = be64toh(ibv_get_device_guid(list[i]));
    std::snprintf(guid, sizeof guid, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
                  static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
                  static_cast<unsigned>(g) & 0xffff);
    d.node_guid = guid;
    if (topo) d.loc = topo->locality_of_ibdev(d.name);
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) {
      Port p;
      p.state = std::string("cannot open: ") + std::strerror(errno);
      d.ports.push_back(p);
      out.push_back(std::move(d));
      continue;
    }
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) == 0) {
      for (int pn = 1; pn <= da.phys_port_cnt; ++pn) {
        ibv_port_attr pa{};
        Port p;
        p.num = pn;
        if (ibv_query_port(ctx, static_cast<uint8_t>(pn), &pa) != 0) {
          p.state = "query failed";
          d.ports.push_back(p);
          continue;
        }
        p.state = ibv_port_state_str(pa.state);
        p.active = pa.state == IBV_PORT_ACTIVE;
        p.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        p.speed_gbps = port_speed_mbps(pa.active_speed, pa.active_width) / 1000.0;
        p.active_mtu = verbs::mtu_bytes(pa.active_mtu);
        p.max_mtu = verbs::mtu_bytes(pa.max_mtu);
        std::vector<GidEntry> entries =
            read_gid_table(ctx, d.name, static_cast<uint8_t>(pn), pa.gid_tbl_len);
        for (const GidEntry& e : entries)
          p.gids.push_back({e.index, gid_to_string(e.gid), gid_type_text(d.name, pn, e.index), e});
        p.transport = transport_name(list[i]->transport_type);
        const std::string blocker = unusable_transport_reason(list[i]->transport_type, d.name);
        if (!blocker.empty()) {  // not offered by the engine (engine.cc)
          p.chosen = "none: " + blocker;
        } else if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
          auto c = choose_roce_gid(entries, policy);
          if (c.is_ok()) {
            p.chosen_index = c.value().index;
            p.chosen = c.value().reason;
            if (p.chosen.rfind("index", 0) != 0)
              p.chosen = "index " + std::to_string(c.value().index) + ": " + p.chosen;
          } else {
            p.chosen = "none: " + c.status().message();
          }
        } else {
          p.chosen = "InfiniBand: LID routing (GID used only across subnets)";
        }
        // The addresses rdma_cm binds for this port (the listener's choice: choose_cm_address).
        for (const PortAddr& a :
             port_addresses(d.name, pn, pa.link_layer == IBV_LINK_LAYER_ETHERNET,
                            list[i]->transport_type == IBV_TRANSPORT_IWARP, entries))
          if (!a.link_local) p.ips.push_back({address_to_string(a.addr), a.gid_index});
        const CmDecision cm =
            cm_for_port(static_cast<CmMode>(cfg.cm_mode),
                        list[i]->transport_type == IBV_TRANSPORT_IWARP, !p.ips.empty());
        p.cm = cm.verdict == CmDecision::kRdmacm ? "rdmacm"
               : cm.verdict == CmDecision::kOob  ? "oob"
                                                 : "error";
        p.cm_reason = cm.reason;
        d.ports.push_back(std::move(p));
      }
    }
    if (ibv_pd* pd = ibv_alloc_pd(ctx)) {
      d.dmabuf = probe_dmabuf(pd, d.name);
      d.ro = probe_relaxed_ordering(pd, d.name);
      d.ece = probe_ece(ctx, pd, cfg.ece_enable);
      d.probed = true;
      ibv_dealloc_pd(pd);
    }
    ibv_close_device(ctx);
    out.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  return out;
}

std::vector<Device> devices_from_xml(const Topology& t) {
  std::vector<Device> out;
  for (const auto& n : t.nics()) {
    Device d;
    d.name = n.name;
    d.node_guid = n.node_guid;
    d.source = "hwloc XML";
    d.loc = t.locality_of_nic(n.index);
    for (size_t i = 0; i < n.port_states.size(); ++i) {
      Port p;
      p.num = static_cast<int>(i + 1);
      p.active = n.port_states[i] == 4;
      p.state = p.active                ? "ACTIVE"
                : n.port_states[i] == 1 ? "DOWN"
                                        : std::to_string(n.port_states[i]);
      p.chosen = "(not available from an XML file)";
      d.ports.push_back(p);
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string cpus_str(const std::vector<int>& c) {
  if (c.empty()) return "unknown";
  std::string s;
  for (size_t i = 0; i < c.size();) {
    size_t j = i;
    while (j + 1 < c.size() && c[j + 1] == c[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(c[i]);
    if (j > i) s += "-" + std::to_string(c[j]);
    i = j + 1;
  }
  return s;
}

std::string memlock_str(const rlimit& rl) {
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(rl.rlim_cur / 1024) + " KiB";
}

void usage(std::ostream& os) {
  os << "usage: sluice-info [--topology FILE.xml] [--json | --dot [FILE]] [--config] [--version]\n"
        "                   [--help]\n"
        "  Lists RDMA devices (ports, state, link layer, speed, MTU, GIDs and the GID Sluice\n"
        "  would choose), GPUs, NUMA nodes, the GPU -> NIC table with distance classes,\n"
        "  GPUDirect status, the locked-memory limit, and warnings with a one-line fix.\n"
        "  --topology FILE.xml  read an hwloc XML export instead of the live machine\n"
        "                       (RDMA devices then come from the file, not from verbs)\n"
        "  --json               machine-readable output\n"
        "  --dot [FILE]         Graphviz DOT of GPUs, NICs, switches and NUMA nodes; FILE.svg or\n"
        "                       FILE.png is rendered with `dot` when installed, other FILEs get\n"
        "                       the DOT text, no FILE prints it\n"
        "  --config             every configuration parameter: name, aliases, type, default,\n"
        "                       allowed values, meaning, and the value in effect here\n"
        "  --version            version and source revision\n"
        "  Environment: SLUICE_TOPO_FILE (as --topology), SLUICE_NIC_AFFINITY, "
        "SLUICE_GPU_NIC_MAP,\n"
        "  NCCL_IB_GID_INDEX / NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE / "
        "NCCL_IB_ROCE_VERSION_NUM.\n";
}

int render_dot(const std::string& dot, const std::string& file) {
  auto ends_with = [&](const char* suf) {
    size_t n = std::strlen(suf);
    return file.size() >= n && file.compare(file.size() - n, n, suf) == 0;
  };
  if (file.empty()) {
    std::cout << dot;
    return 0;
  }
  std::string fmt = ends_with(".svg") ? "svg" : ends_with(".png") ? "png" : "";
  if (fmt.empty()) {
    std::ofstream f(file);
    f << dot;
    if (!f) {
      std::cerr << "sluice-info: cannot write " << file << "\n";
      return 1;
    }
    return 0;
  }
  std::string dotfile = file + ".dot";
  {
    std::ofstream f(dotfile);
    f << dot;
  }
  pid_t pid = fork();
  if (pid == 0) {
    std::string o = "-o" + file, t = "-T" + fmt;
    execlp("dot", "dot", t.c_str(), o.c_str(), dotfile.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::cerr << "sluice-info: Graphviz `dot` is not installed or failed; DOT text left in "
              << dotfile << " (render it with: dot -T" << fmt << " -o " << file << " " << dotfile
              << ")\n";
    return 1;
  }
  std::remove(dotfile.c_str());
  std::cerr << "sluice-info: wrote " << file << "\n";
  return 0;
}

}  // namespace

// --config: the typed table from the library itself, with the values in effect in this
// environment (a bad value is reported, as the plugin's init would).
int print_config() {
  std::vector<ParamSource> sources;
  auto cfg = load_config_from_environment(&sources);
  for (const ParamDoc& d : param_docs()) {
    std::string set;
    for (const auto& s : sources)
      if (s.name == d.name) set = s.value + " (set by " + s.set_by + ")";
    std::cout << d.name;
    for (const auto& a : d.aliases) std::cout << " | " << a;
    std::cout << "\n    " << d.type << ", default "
              << (d.default_value.empty() ? "unset" : d.default_value)
              << (d.allowed.empty() ? "" : ", allowed " + d.allowed)
              << (set.empty() ? "" : "; now " + set) << "\n    " << d.doc << "\n";
  }
  if (!cfg.is_ok()) {
    std::cout << "\nconfiguration error: " << cfg.status().message() << "\n";
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string topo_file, dot_file;
  bool json = false, dot = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(std::cout);
      return 0;
    } else if (a == "--config") {
      return print_config();
    } else if (a == "--version") {
      std::cout << "sluice-info " << version() << " (" << revision() << ")\n";
      return 0;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--dot") {
      dot = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') dot_file = argv[++i];
    } else if (a == "--topology" && i + 1 < argc) {
      topo_file = argv[++i];
    } else if (a.rfind("--topology=", 0) == 0) {
      topo_file = a.substr(11);
    } else {
      std::cerr << "sluice-info: unknown argument '" << a << "'\n";
      usage(std::cerr);
      return 2;
    }
  }

  std::vector<Warning> warnings;
  auto cfg_r = load_config_from_environment();
  Config cfg;
  if (cfg_r.is_ok()) {
    cfg = cfg_r.value();
    verbs::hide_for_test(cfg.test_hide_verbs);  // before the devices are probed
  } else {
    warnings.push_back(
        {"configuration: " + cfg_r.status().message(), "fix or unset the variable named above"});
  }
  if (topo_file.empty()) topo_file = cfg.topo_file;

  auto topo_r = topo_file.empty() ? Topology::load_live() : Topology::load_xml_file(topo_file);
  if (!topo_r.is_ok()) {
    std::cerr << "sluice-info: " << topo_r.status().message() << "\n";
    return 1;
  }
  const Topology& t = topo_r.value();

  if (dot) return render_dot(t.to_dot(), dot_file);

  std::string verbs_error;
  std::vector<Device> devices =
      t.is_live() ? list_verbs_devices(&t, cfg, &verbs_error) : devices_from_xml(t);

  rlimit rl{};
  getrlimit(RLIMIT_MEMLOCK, &rl);
  auto assignment = t.assign();

  // Affinity configuration.
  std::vector<std::string> nic_names;
  for (const auto& d : devices) nic_names.push_back(d.name);
  std::string affinity_mode = "off", override_text;
  auto mode = parse_affinity_mode(cfg.nic_affinity);
  if (!mode.is_ok())
    warnings.push_back({mode.status().message(), "set SLUICE_NIC_AFFINITY=auto or off"});
  else if (mode.value() == AffinityMode::kAuto)
    affinity_mode = "auto";
  GpuNicMap override_map;
  if (!cfg.gpu_nic_map.empty()) {
    auto m = parse_gpu_nic_map(cfg.gpu_nic_map, t, nic_names);
    if (m.is_ok()) {
      override_map = m.value();
      override_text = override_map.to_string();
    } else {
      warnings.push_back(
          {m.status().message(), "correct SLUICE_GPU_NIC_MAP (see docs/topology.md)"});
    }
  }

  // Warnings.
  if (t.is_live() && !verbs_error.empty())
    warnings.push_back({verbs_error, "install rdma-core / load the RDMA driver (rdma link show)"});
  if (devices.empty())
    warnings.push_back({"no RDMA device found",
                        t.is_live() ? "load the NIC's RDMA driver, or for testing: rdma link add "
                                      "rxe0 type rxe netdev <if>"
                                    : "this topology has no OpenFabrics device"});
  std::map<int, std::vector<std::string>> mtus;
  for (const auto& d : devices)
    for (const auto& p : d.ports) {
      if (p.num > 0 && !p.active)
        warnings.push_back({d.name + " port " + std::to_string(p.num) + " is " + p.state,
                            "check the cable/switch port and `ip link set <netdev> up`; Sluice "
                            "skips inactive ports"});
      if (p.active && p.active_mtu > 0)
        mtus[p.active_mtu].push_back(d.name + ":" + std::to_string(p.num));
      if (p.active && p.link_layer == "Ethernet" && p.chosen_index < 0)
        warnings.push_back(
            {d.name + " port " + std::to_string(p.num) + ": no usable RoCE GID (" + p.chosen + ")",
             "give the netdev an IP address (ip addr add ... dev <netdev>)"});
    }
  if (mtus.size() > 1) {
    std::string s;
    for (const auto& [m, ps] : mtus)
      for (const auto& p : ps) s += (s.empty() ? "" : ", ") + p + "=" + std::to_string(m);
    warnings.push_back({"active MTU differs between ports (" + s + ")",
                        "set the same MTU on every netdev/switch port (ip link set <if> mtu ...)"});
  }
  for (const auto& ga : assignment) {
    if (ga.cls == PathClass::kSYS) {
      std::string nics;
      for (int n : ga.nics) nics += (nics.empty() ? "" : ",") + t.nics()[n].name;
      warnings.push_back(
          {"GPU" + std::to_string(ga.gpu) + " (" + t.gpus()[ga.gpu].bus_id + ", NUMA " +
               std::to_string(t.gpus()[ga.gpu].numa_node) +
               ") has no NIC on its NUMA node; nearest is " + nics + " (SYS)",
           "expect cross-socket traffic; bind the rank to the NIC's NUMA node or add "
           "a NIC near this GPU"});
    }
  }
  const rlim_t kMinMemlock = 64ull << 20;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < kMinMemlock)
    warnings.push_back({"locked-memory limit is " + memlock_str(rl) +
                            " (RDMA registration needs "
                            "more)",
                        "ulimit -l unlimited (containers: --ulimit memlock=-1; systemd: "
                        "LimitMEMLOCK=infinity)"});

  // GPUDirect: the same facts and decision the plugin logs at init.
  const GpuFacts facts = gpu::gpu_facts(cfg);
  struct GdrRow {
    std::string name;
    bool probed;
    DmabufProbe probe;
    GdrDecision d;
  };
  std::vector<GdrRow> gdr_rows;
  for (const auto& d : devices) {
    if (!d.probed) continue;
    gdr_rows.push_back({d.name, true, d.dmabuf, decide_gdr(cfg, facts, d.dmabuf, d.name)});
  }
  // Production-fabric features (issue 21): the decisions the plugin logs at init, per device.
  struct FabricRow {
    std::string name;
    RelaxedOrdering ro;
    EceQuery ece;
    std::vector<std::pair<int, AdaptiveRouting>> ar;  // per port
    std::vector<std::pair<int, std::string>> flow;    // per port: SLUICE_FLOW_LABEL's effect
  };
  const auto flow_policy = flow::parse_policy(cfg.flow_label);
  std::vector<FabricRow> fabric_rows;
  for (const auto& d : devices) {
    if (!d.probed) continue;
    FabricRow r{d.name, decide_relaxed_ordering(cfg.pci_relaxed_ordering, d.ro), d.ece, {}, {}};
    for (const auto& p : d.ports) {
      if (!p.active) continue;
      r.ar.emplace_back(
          p.num, decide_adaptive_routing(cfg.adaptive_routing, cfg.ar_threshold,
                                         p.link_layer == "Ethernet" ? IBV_LINK_LAYER_ETHERNET
                                                                    : IBV_LINK_LAYER_INFINIBAND));
      r.flow.emplace_back(
          p.num, flow::port_text(flow_policy.is_ok() ? flow_policy.value() : flow::Policy{},
                                 p.link_layer == "Ethernet"));
    }
    fabric_rows.push_back(std::move(r));
  }
  const std::string mqp_text =
      "ibv_modify_qp retried " + std::to_string(cfg.mqp_retry_cnt) + " times on " +
      (cfg.mqp_retry_all ? "every error" : "ETIMEDOUT") + ", retry k after k x " +
      std::to_string(cfg.mqp_retry_sleep_ms) +
      " ms (NCCL_IB_MQP_RETRY_ALL, NCCL_IB_MQP_RETRY_CNT, NCCL_IB_MQP_RETRY_SLEEP_MSEC)";
  const auto& drv = gpu::CudaDriver::instance(cfg.cuda_library.c_str());
  std::string driver_text = facts.driver
                                ? "CUDA driver " + std::to_string(drv.driver_version() / 1000) +
                                      "." + std::to_string((drv.driver_version() % 1000) / 10) +
                                      ", " + std::to_string(drv.gpus().size()) + " GPU(s)"
                                : "no CUDA driver: " + facts.driver_reason;
  // NIC fusion: NCCL's default fusions, the would-be ones, weights and rails (info_fusion.h).
  std::vector<info::PortFact> port_facts;
  for (const auto& d : devices)
    for (const auto& p : d.ports)
      if (p.num > 0)
        port_facts.push_back({d.name, p.num, p.active, static_cast<int>(p.speed_gbps * 1000)});
  const info::FusionReport fusion =
      info::fusion_report(t, cfg, port_facts, drv.current_device_bus_id());
  // Each device's standby (info_standby.h): the ports the engine would use, with the memory kinds
  // each registers (the GPUDirect decision; none known from an XML topology).
  std::vector<info::StandbyPort> standby_ports;
  for (const auto& d : devices) {
    int ptr = 0;
    for (const auto& r : gdr_rows)
      if (r.name == d.name) ptr = r.d.ptr_support;
    if (d.ports.empty() && !t.is_live()) {  // an XML NIC without port states: maybe active
      standby_ports.push_back({d.name, 1, false, true, "", ptr});
      continue;
    }
    for (const auto& p : d.ports) {
      if (p.num <= 0 || (!p.transport.empty() && p.transport != "InfiniBand")) continue;
      if (p.active && p.link_layer == "Ethernet" && p.chosen_index < 0) continue;  // no RoCE GID
      const std::string link = p.link_layer == "Ethernet"     ? "RoCE"
                               : p.link_layer == "InfiniBand" ? "InfiniBand"
                                                              : "";
      standby_ports.push_back({d.name, p.num, d.ports.size() > 1, p.active, link, ptr});
    }
  }
  const info::StandbyReport standby = info::standby_report(t, cfg, standby_ports);
  auto ptr_text = [](int ptr) {
    std::string s = "HOST";
    if (ptr & kPtrCuda) s += "|CUDA";
    if (ptr & kPtrDmabuf) s += "|DMABUF";
    return s;
  };

  if (json) {
    std::ostringstream o;
    o << "{\n  \"source\": " << json_str(t.source())
      << ",\n  \"live\": " << (t.is_live() ? "true" : "false")
      << ",\n  \"packages\": " << t.package_count() << ",\n  \"rdma_devices\": [";
    for (size_t i = 0; i < devices.size(); ++i) {
      const auto& d = devices[i];
      o << (i ? "," : "") << "\n    {\"name\": " << json_str(d.name)
        << ", \"source\": " << json_str(d.source) << ", \"node_guid\": " << json_str(d.node_guid)
        << ", \"pci_path\": " << json_str(d.loc.pci_path) << ", \"numa_node\": " << d.loc.numa_node
        << ", \"cpus\": " << json_str(cpus_str(d.loc.cpus)) << ", \"ports\": [";
      for (size_t k = 0; k < d.ports.size(); ++k) {
        const auto& p = d.ports[k];
        o << (k ? ", " : "") << "{\"port\": " << p.num << ", \"state\": " << json_str(p.state)
          << ", \"link_layer\": " << json_str(p.link_layer)
          << ", \"transport\": " << json_str(p.transport) << ", \"speed_gbps\": " << p.speed_gbps
          << ", \"active_mtu\": " << p.active_mtu << ", \"max_mtu\": " << p.max_mtu
          << ", \"chosen_gid_index\": " << p.chosen_index
          << ", \"chosen_gid\": " << json_str(p.chosen) << ", \"cm\": " << json_str(p.cm)
          << ", \"cm_reason\": " << json_str(p.cm_reason) << ", \"ips\": [";
        for (size_t q = 0; q < p.ips.size(); ++q)
          o << (q ? ", " : "") << "{\"ip\": " << json_str(p.ips[q].first)
            << ", \"gid_index\": " << p.ips[q].second << "}";
        o << "], \"gids\": [";
        for (size_t q = 0; q < p.gids.size(); ++q)
          o << (q ? ", " : "") << "{\"index\": " << p.gids[q].index
            << ", \"gid\": " << json_str(p.gids[q].text)
            << ", \"type\": " << json_str(p.gids[q].type) << "}";
        o << "]}";
      }
      o << "]}";
    }
    o << "\n  ],\n  \"nics\": [";
    for (size_t i = 0; i < t.nics().size(); ++i) {
      const auto& n = t.nics()[i];
      o << (i ? "," : "") << "\n    {\"name\": " << json_str(n.name)
        << ", \"pci_bus_id\": " << json_str(n.bus_id) << ", \"numa_node\": " << n.numa_node
        << ", \"adapter\": " << n.adapter << ", \"link_speed_GBps\": " << n.link_speed_gbps
        << ", \"cpus\": " << json_str(cpus_str(n.cpus)) << "}";
    }
    o << "\n  ],\n  \"gpus\": [";
    for (size_t i = 0; i < t.gpus().size(); ++i) {
      const auto& g = t.gpus()[i];
      o << (i ? "," : "") << "\n    {\"index\": " << g.index
        << ", \"pci_bus_id\": " << json_str(g.bus_id) << ", \"name\": " << json_str(g.name)
        << ", \"numa_node\": " << g.numa_node << ", \"link_speed_GBps\": " << g.link_speed_gbps
        << ", \"cpus\": " << json_str(cpus_str(g.cpus)) << ", \"classes\": {";
      for (size_t k = 0; k < t.nics().size(); ++k) {
        auto pi = t.classify(g.index, static_cast<int>(k));
        o << (k ? ", " : "") << json_str(t.nics()[k].name) << ": "
          << json_str(std::string(path_class_name(pi.cls)) +
                      (pi.cls == PathClass::kSYS && pi.same_package ? " (same pkg)" : ""));
      }
      o << "}, \"nearest\": [";
      auto near = t.nearest_nics(g.index);
      for (size_t k = 0; k < near.size(); ++k)
        o << (k ? ", " : "") << json_str(t.nics()[near[k].nic].name);
      o << "], \"assigned\": [";
      for (size_t k = 0; k < assignment[i].nics.size(); ++k)
        o << (k ? ", " : "") << json_str(t.nics()[assignment[i].nics[k]].name);
      o << "], \"class\": " << json_str(path_class_name(assignment[i].cls)) << "}";
    }
    o << "\n  ],\n  \"numa_nodes\": [";
    for (size_t i = 0; i < t.numa_nodes().size(); ++i) {
      const auto& nn = t.numa_nodes()[i];
      o << (i ? ", " : "") << "{\"os_index\": " << nn.os_index << ", \"package\": " << nn.package
        << ", \"cpus\": " << json_str(cpus_str(nn.cpus))
        << ", \"memory_bytes\": " << nn.local_memory << "}";
    }
    o << "],\n  \"nic_affinity\": " << json_str(affinity_mode)
      << ",\n  \"gpu_nic_map\": " << json_str(override_text) << ",\n  \"gpudirect\": {\"mode\": "
      << json_str(cfg.gdr_mode == 0   ? "off"
                  : cfg.gdr_mode == 2 ? "force"
                                      : "auto")
      << ", \"driver\": " << (facts.driver ? "true" : "false")
      << ", \"driver_text\": " << json_str(driver_text)
      << ", \"peermem\": " << (facts.peermem ? "true" : "false")
      << ", \"peermem_reason\": " << json_str(facts.peermem_reason) << ", \"gpus\": [";
    for (size_t i = 0; i < drv.gpus().size(); ++i) {
      const auto& g = drv.gpus()[i];
      o << (i ? ", " : "") << "{\"index\": " << i << ", \"name\": " << json_str(g.name)
        << ", \"pci_bus_id\": " << json_str(g.bus_id)
        << ", \"gpu_direct_rdma_supported\": " << (g.rdma ? "true" : "false")
        << ", \"dma_buf_supported\": " << (g.dmabuf ? "true" : "false")
        << ", \"c2c\": " << (g.c2c ? "true" : "false") << "}";
    }
    o << "], \"devices\": [";
    for (size_t i = 0; i < gdr_rows.size(); ++i) {
      const auto& r = gdr_rows[i];
      o << (i ? "," : "") << "\n    {\"name\": " << json_str(r.name)
        << ", \"ptr_support\": " << json_str(ptr_text(r.d.ptr_support))
        << ", \"dmabuf_probe_supported\": " << (r.probe.supported ? "true" : "false")
        << ", \"dmabuf_probe\": " << json_str(r.probe.text)
        << ", \"summary\": " << json_str(r.d.summary) << ", \"reasons\": [";
      for (size_t k = 0; k < r.d.reasons.size(); ++k)
        o << (k ? ", " : "") << json_str(r.d.reasons[k]);
      o << "]}";
    }
    o << "]}";
    o << ",\n  \"fabric\": {\"rdma_core\": " << json_str(verbs::ext_summary())
      << ", \"modify_qp_retry\": " << json_str(mqp_text) << ", \"devices\": [";
    for (size_t i = 0; i < fabric_rows.size(); ++i) {
      const auto& r = fabric_rows[i];
      o << (i ? "," : "") << "\n    {\"name\": " << json_str(r.name)
        << ", \"relaxed_ordering\": " << (r.ro.on ? "true" : "false")
        << ", \"relaxed_ordering_reason\": " << json_str(r.ro.why)
        << ", \"ece\": " << json_str(ece_text(r.ece.ece))
        << ", \"ece_reason\": " << json_str(r.ece.text) << ", \"adaptive_routing\": [";
      for (size_t k = 0; k < r.ar.size(); ++k)
        o << (k ? ", " : "") << "{\"port\": " << r.ar[k].first
          << ", \"on\": " << (r.ar[k].second.on ? "true" : "false")
          << ", \"reason\": " << json_str(r.ar[k].second.why) << "}";
      o << "]}";
    }
    o << "]}";
    o << ",\n  \"fusion\": {\"policy\": " << json_str(fusion.policy) << ", \"groups\": [";
    for (size_t i = 0; i < fusion.groups.size(); ++i) {
      const auto& g = fusion.groups[i];
      o << (i ? "," : "") << "\n    {\"members\": [";
      for (size_t k = 0; k < g.members.size(); ++k) o << (k ? ", " : "") << json_str(g.members[k]);
      o << "], \"why\": " << json_str(g.why)
        << ", \"nccl_default\": " << (g.nccl_default ? "true" : "false")
        << ", \"gpu\": " << json_str(g.gpu) << ", \"refusal\": " << json_str(g.refusal)
        << ", \"weights\": [";
      for (size_t k = 0; k < g.weights.size(); ++k)
        o << (k ? ", " : "") << "{\"name\": " << json_str(g.weights[k].name)
          << ", \"weight\": " << g.weights[k].weight
          << ", \"reason\": " << json_str(g.weights[k].reason) << "}";
      o << "]}";
    }
    o << "], \"rails\": [";
    for (size_t i = 0; i < fusion.rails.size(); ++i) {
      const auto& rr = fusion.rails[i];
      o << (i ? ", " : "") << "{\"device\": " << json_str(rr.device) << ", \"port\": " << rr.port
        << ", \"rail\": " << rr.rail << ", \"plane\": " << rr.plane
        << ", \"reason\": " << json_str(rr.reason) << "}";
    }
    o << "]}";
    o << ",\n  \"standby\": {\"on\": " << (standby.on ? "true" : "false")
      << ", \"state\": " << json_str(standby.state) << ", \"devices\": [";
    for (size_t i = 0; i < standby.rows.size(); ++i) {
      const auto& sr = standby.rows[i];
      o << (i ? "," : "") << "\n    {\"name\": " << json_str(sr.name)
        << ", \"standby\": " << json_str(sr.standby) << ", \"nearness\": " << json_str(sr.nearness)
        << ", \"reason\": " << json_str(sr.reason) << "}";
    }
    o << "]}"
      << ",\n  \"memlock\": " << json_str(memlock_str(rl)) << ",\n  \"warnings\": [";
    for (size_t i = 0; i < warnings.size(); ++i)
      o << (i ? "," : "") << "\n    {\"problem\": " << json_str(warnings[i].what)
        << ", \"fix\": " << json_str(warnings[i].fix) << "}";
    o << "\n  ]\n}\n";
    std::cout << o.str();
    return 0;
  }

  std::ostream& o = std::cout;
  o << "Sluice topology: " << (t.is_live() ? "live machine" : "hwloc XML " + t.source()) << ", "
    << t.package_count() << " package(s), " << t.numa_nodes().size() << " NUMA node(s), "
    << t.gpus().size() << " GPU(s), " << t.nics().size() << " RDMA NIC(s) in hwloc ("
    << t.adapter_count() << " adapter(s))\n\n";

  o << "RDMA devices (" << (t.is_live() ? "verbs" : "from the XML file") << "): " << devices.size()
    << "\n";
  for (const auto& d : devices) {
    o << "  " << d.name << "  guid " << d.node_guid << "  "
      << (d.loc.pci_path.empty() && d.loc.numa_node < 0
              ? std::string("locality unknown (virtual or non-PCI device)")
              : "NUMA " + std::to_string(d.loc.numa_node) + "  cpus " + cpus_str(d.loc.cpus) +
                    (d.loc.pci_path.empty() ? "" : "  " + d.loc.pci_path))
      << "\n";
    for (const auto& p : d.ports) {
      o << "    port " << p.num << ": " << p.state;
      if (!p.link_layer.empty())
        o << ", " << p.link_layer << (p.transport.empty() ? "" : ", transport " + p.transport)
          << ", " << p.speed_gbps << " Gb/s, MTU " << p.active_mtu << " (max " << p.max_mtu << ")";
      o << "\n";
      for (const auto& gd : p.gids)
        o << "      gid[" << gd.index << "] " << gd.text << "  "
          << (gd.type.empty() ? "?" : gd.type) << "\n";
      if (!p.chosen.empty()) o << "      Sluice would use: " << p.chosen << "\n";
      const char* netdev = p.link_layer == "InfiniBand" ? "  (IPoIB)" : "  (netdev)";
      for (const auto& [ip, gid] : p.ips)
        o << "      ip " << ip << (gid >= 0 ? "  = gid[" + std::to_string(gid) + "]" : netdev)
          << "\n";
      if (!p.cm.empty()) o << "      connection manager: " << p.cm << " (" << p.cm_reason << ")\n";
    }
  }

  o << "\nGPUs: " << t.gpus().size() << "\n";
  for (const auto& g : t.gpus())
    o << "  GPU" << g.index << "  " << g.bus_id << "  " << (g.name.empty() ? "?" : g.name)
      << "  NUMA " << g.numa_node << "  cpus " << cpus_str(g.cpus) << "  PCIe " << g.link_speed_gbps
      << " GB/s\n";

  o << "\nNUMA nodes: " << t.numa_nodes().size() << "\n";
  for (const auto& nn : t.numa_nodes())
    o << "  P#" << nn.os_index << "  package " << nn.package << "  cpus " << cpus_str(nn.cpus)
      << "  " << (nn.local_memory >> 20) << " MiB\n";

  o << "\nNICs in the topology: " << t.nics().size() << "\n";
  for (const auto& n : t.nics())
    o << "  " << n.name << "  " << (n.bus_id.empty() ? "(no PCI: unknown locality)" : n.bus_id)
      << "  NUMA " << n.numa_node << "  adapter " << n.adapter << "  PCIe " << n.link_speed_gbps
      << " GB/s" << (n.model.empty() ? "" : "  " + n.model) << "\n";

  if (!t.gpus().empty()) {
    o << "\nGPU -> NIC (PIX same PCIe switch, PXB several switches, PHB same host bridge, NODE "
         "same NUMA node, SYS across NUMA nodes; * = SYS within one package)\n";
    o << "  GPU ";
    for (const auto& n : t.nics()) o << "  " << n.name;
    o << "  | Sluice assigns\n";
    for (const auto& g : t.gpus()) {
      o << "  GPU" << g.index;
      for (const auto& n : t.nics()) {
        auto pi = t.classify(g.index, n.index);
        std::string c = std::string(path_class_name(pi.cls)) +
                        (pi.cls == PathClass::kSYS && pi.same_package ? "*" : "");
        std::string pad(n.name.size() > c.size() ? n.name.size() - c.size() : 0, ' ');
        o << "  " << c << pad;
      }
      o << "  | ";
      const auto& ga = assignment[g.index];
      if (ga.nics.empty()) o << "(no NIC)";
      for (size_t k = 0; k < ga.nics.size(); ++k) o << (k ? "," : "") << t.nics()[ga.nics[k]].name;
      if (!ga.nics.empty()) o << " (" << path_class_name(ga.cls) << ")";
      o << "\n";
    }
  }
  o << "\nNIC affinity: SLUICE_NIC_AFFINITY=" << affinity_mode;
  if (!override_text.empty()) o << ", override SLUICE_GPU_NIC_MAP=" << override_text;
  o << "\n";
  if (t.is_live() && t.gpus().empty()) {
    auto order = order_nics(t, nic_names, AffinityRequest{"", t.current_cpu_binding()});
    o << "  no GPU: NIC order for this process's CPU binding: ";
    for (size_t k = 0; k < order.nics.size(); ++k) o << (k ? ", " : "") << order.nics[k];
    o << " (" << order.reason << ")\n";
  }
  o << "GPUDirect RDMA (SLUICE_GDR="
    << (cfg.gdr_mode == 0   ? "off"
        : cfg.gdr_mode == 2 ? "force"
                            : "auto")
    << "): " << driver_text << "\n";
  for (size_t i = 0; i < drv.gpus().size(); ++i) {
    const auto& g = drv.gpus()[i];
    o << "  GPU" << i << " " << g.bus_id << " " << g.name
      << ": GPU_DIRECT_RDMA_SUPPORTED=" << g.rdma << " DMA_BUF_SUPPORTED=" << g.dmabuf
      << (g.attr_error.empty() ? "" : " (" + g.attr_error + ")") << "\n";
  }
  o << "  peermem: " << facts.peermem_reason << "\n";
  if (gdr_rows.empty())
    o << (t.is_live() ? "  no RDMA device to probe for dma-buf\n"
                      : "  NICs not probed (an XML topology describes another machine)\n");
  for (const auto& r : gdr_rows) {
    o << "  " << r.name << ": ptrSupport " << ptr_text(r.d.ptr_support) << ": "
      << (r.d.cuda ? "zero-copy GPUDirect" : "NCCL stages GPU data through host memory") << "\n";
    o << "    dma-buf probe: " << r.probe.text << "\n";
    for (const auto& why : r.d.reasons) o << "    no: " << why << "\n";
  }
  o << "Fabric features: " << verbs::ext_summary() << "\n";
  o << "  modify-QP retries: " << mqp_text << "\n";
  for (const auto& r : fabric_rows) {
    o << "  " << r.name << ": PCIe relaxed ordering " << r.ro.why << "\n";
    o << "  " << r.name << ": ECE "
      << (r.ece.ece.supported ? ece_text(r.ece.ece) + " (set on both ends' QPs before RTR)"
                              : "not used: " + r.ece.text)
      << "\n";
    for (const auto& [port, ar] : r.ar)
      o << "  " << r.name << ":" << port << ": adaptive routing " << ar.why << "\n";
    for (const auto& [port, text] : r.flow)
      o << "  " << r.name << ":" << port << ": flow labels " << text << "\n";
  }
  o << "NIC fusion (makeVDevice; " << fusion.policy << "): "
    << (fusion.groups.empty() ? "nothing to fuse"
                              : std::to_string(fusion.groups.size()) + " group(s)")
    << "\n";
  for (const auto& g : fusion.groups) {
    std::string names;
    for (const auto& m : g.members) names += (names.empty() ? "" : "+") + m;
    o << "  " << names << ": " << (g.nccl_default ? "NCCL's default fusion" : "would-be fusion")
      << ", " << g.why << "\n";
    if (!g.refusal.empty()) o << "    refused: " << g.refusal << "\n";
    o << "    weights" << (g.gpu.empty() ? " (no GPU)" : " for " + g.gpu) << ":\n";
    for (const auto& m : g.weights)
      o << "      " << m.name << " = " << m.weight << (m.weight == 0 ? " (fallback only)" : "")
        << ": " << m.reason << "\n";
  }
  o << "Rails (net v12 railId/planeId):\n";
  for (const auto& rr : fusion.rails)
    o << "  " << rr.device << ":" << rr.port << ": rail " << rr.rail << ", plane " << rr.plane
      << ": " << rr.reason << "\n";
  o << "Standby (a second device per comm, used only when the first fails): " << standby.state
    << (standby.on ? "" : "; with SLUICE_STANDBY=1 each device's would be") << "\n";
  if (standby.rows.empty()) o << "  no usable device\n";
  for (const auto& sr : standby.rows) o << "  " << sr.name << ": standby " << sr.reason << "\n";
  o << "Locked-memory limit (ulimit -l): " << memlock_str(rl) << "\n";
  o << "\nWarnings: " << (warnings.empty() ? "none" : std::to_string(warnings.size())) << "\n";
  for (const auto& w : warnings) o << "  WARNING " << w.what << "\n    fix: " << w.fix << "\n";
  return 0;
}
