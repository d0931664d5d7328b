#include "sluice/topology/affinity.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace sluice::topo {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 6 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string base_name(std::string_view nic) {
  auto colon = nic.find(':');
  return std::string(colon == std::string_view::npos ? nic : nic.substr(0, colon));
}

constexpr int kMaxPort = 255;  // verbs port numbers are uint8_t, counted from 1

bool valid_nic_token(std::string_view nic) {
  if (nic.empty()) return false;
  auto colon = nic.find(':');
  if (colon == 0) return false;
  if (colon != std::string_view::npos) {
    std::string_view port = nic.substr(colon + 1);
    if (!all_digits(port)) return false;
    const int number = std::stoi(std::string(port));  // all_digits: at most 6 digits
    if (number < 1 || number > kMaxPort) return false;
  }
  std::string_view name = nic.substr(0, colon);
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

Result<AffinityMode> parse_affinity_mode(std::string_view text) {
  std::string t(trim(text));
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t.empty() || t == "off" || t == "0" || t == "none") return AffinityMode::kOff;
  if (t == "auto" || t == "1") return AffinityMode::kAuto;
  return Status(Code::kInvalidArgument,
                "SLUICE_NIC_AFFINITY='" + std::string(text) + "': expected 'auto' or 'off'");
}

const GpuNicMapEntry* GpuNicMap::find(int gpu_index, std::string_view gpu_bus_id) const {
  std::string norm = gpu_bus_id.empty() ? "" : normalize_pci_bus_id(gpu_bus_id);
  for (const auto& e : entries) {
    if (!norm.empty() && e.gpu_bus_id == norm) return &e;
    if (gpu_index >= 0 && e.gpu_index == gpu_index) return &e;
  }
  return nullptr;
}

std::string GpuNicMap::to_string() const {
  std::string out;
  for (const auto& e : entries) {
    if (!out.empty()) out += ';';
    out += e.gpu_bus_id.empty() ? e.gpu : e.gpu_bus_id;
    out += '=';
    for (size_t i = 0; i < e.nics.size(); ++i) out += (i ? "," : "") + e.nics[i];
  }
  return out;
}

Result<GpuNicMap> parse_gpu_nic_map(std::string_view text) {
  GpuNicMap map;
  if (trim(text).empty()) return map;
  auto err = [&](const std::string& what) {
    return Status(Code::kInvalidArgument,
                  "SLUICE_GPU_NIC_MAP='" + std::string(text) + "': " + what +
                      " (syntax: GPU=NIC[,NIC...][;GPU=...], GPU a PCI bus id or an index, "
                      "e.g. 0000:1b:00.0=mlx5_0,mlx5_1;1=mlx5_2)");
  };
  std::set<std::string> seen;
  for (std::string_view raw : split(text, ';')) {
    std::string_view entry = trim(raw);
    if (entry.empty()) continue;  // tolerate "a=b;" trailing separators
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) return err("entry '" + std::string(entry) + "' has no '='");
    GpuNicMapEntry e;
    std::string_view gpu = trim(entry.substr(0, eq));
    e.gpu = std::string(gpu);
    if (all_digits(gpu)) {
      e.gpu_index = std::stoi(std::string(gpu));
    } else {
      e.gpu_bus_id = normalize_pci_bus_id(gpu);
      if (e.gpu_bus_id.empty())
        return err("'" + std::string(gpu) + "' is neither a GPU index nor a PCI bus id");
    }
    for (std::string_view nraw : split(entry.substr(eq + 1), ',')) {
      std::string_view nic = trim(nraw);
      if (!valid_nic_token(nic))
        return err("bad NIC name '" + std::string(nic) + "' for GPU " + e.gpu);
      e.nics.emplace_back(nic);
    }
    std::string key = e.gpu_index >= 0 ? "#" + std::to_string(e.gpu_index) : e.gpu_bus_id;
    if (!seen.insert(key).second) return err("GPU " + e.gpu + " appears twice");
    map.entries.push_back(std::move(e));
  }
  return map;
}

Status resolve_gpu_nic_map(GpuNicMap* map, const std::vector<std::string>& gpu_bus_ids,
                           const std::vector<std::string>& nic_names) {
  std::vector<std::string> unknown_gpus, unknown_nics;
  std::vector<std::string> norm_ids;
  for (const auto& b : gpu_bus_ids) norm_ids.push_back(normalize_pci_bus_id(b));
  std::set<std::string> known(nic_names.begin(), nic_names.end());
  for (const auto& n : nic_names) known.insert(base_name(n));
  std::set<int> indexes;
  for (auto& e : map->entries) {
    if (e.gpu_index >= 0) {
      if (e.gpu_index < static_cast<int>(norm_ids.size()))
        e.gpu_bus_id = norm_ids[e.gpu_index];
      else
        unknown_gpus.push_back(e.gpu);
    } else {
      auto it = std::find(norm_ids.begin(), norm_ids.end(), e.gpu_bus_id);
      if (it == norm_ids.end())
        unknown_gpus.push_back(e.gpu);
      else
        e.gpu_index = static_cast<int>(it - norm_ids.begin());
    }
    if (e.gpu_index >= 0 && !indexes.insert(e.gpu_index).second)
      return Status(Code::kInvalidArgument,
                    "SLUICE_GPU_NIC_MAP: GPU " + e.gpu + " is listed twice (by index and bus id)");
    for (const auto& n : e.nics)
      if (!known.count(n) && !known.count(base_name(n)) &&
          std::find(unknown_nics.begin(), unknown_nics.end(), n) == unknown_nics.end())
        unknown_nics.push_back(n);
  }
  if (unknown_gpus.empty() && unknown_nics.empty()) return Status::ok();
  std::string msg = "SLUICE_GPU_NIC_MAP:";
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!unknown_gpus.empty())
    msg += " unknown GPU(s) " + join(unknown_gpus) + " (this machine has " +
           std::to_string(gpu_bus_ids.size()) + " GPU(s)" +
           (gpu_bus_ids.empty() ? "" : ": " + join(norm_ids)) + ");";
  if (!unknown_nics.empty())
    msg += " unknown NIC(s) " + join(unknown_nics) +
           " (known: " + (nic_names.empty() ? std::string("none") : join(nic_names)) + ");";
  msg.pop_back();
  return Status(Code::kInvalidArgument, msg);
}

Result<GpuNicMap> parse_gpu_nic_map(std::string_view text, const Topology& topo,
                                    const std::vector<std::string>& nic_names) {
  auto m = parse_gpu_nic_map(text);
  if (!m.is_ok()) return m;
  std::vector<std::string> ids;
  for (const auto& g : topo.gpus()) ids.push_back(g.bus_id);
  Status st = resolve_gpu_nic_map(&m.value(), ids, nic_names);
  if (!st.is_ok()) return st;
  return m;
}

AffinityOrder order_nics(const Topology& topo, const std::vector<std::string>& nic_names,
                         const AffinityRequest& req, const GpuNicMap* override_map) {
  AffinityOrder out;
  const int n = static_cast<int>(nic_names.size());
  // score per input position: lower first; ties keep the input order.
  std::vector<long> score(n, 0);
  const long kUnknown = 1L << 40;
  std::vector<int> topo_nic(n);
  for (int i = 0; i < n; ++i) topo_nic[i] = topo.find_nic(base_name(nic_names[i]));

  int gpu = req.gpu_bus_id.empty() ? -1 : topo.find_gpu(req.gpu_bus_id);
  const GpuNicMapEntry* ov = override_map ? override_map->find(gpu, req.gpu_bus_id) : nullptr;

  std::vector<int> rank_of(topo.nics().size(), -1);  // topology NIC -> rank position
  if (gpu >= 0) {
    int pos = 0;
    std::vector<bool> placed(topo.nics().size(), false);
    for (const auto& ga : topo.assign())
      if (ga.gpu == gpu)
        for (int k : ga.nics) {
          rank_of[k] = pos++;
          placed[k] = true;
        }
    for (const auto& r : topo.ranked_nics(gpu))
      if (!placed[r.nic]) rank_of[r.nic] = pos++;
  }
  std::vector<int> binding = req.cpu_binding;
  std::sort(binding.begin(), binding.end());

  for (int i = 0; i < n; ++i) {
    long s;
    int k = topo_nic[i];
    if (k < 0 || topo.nics()[k].bus_id.empty()) {
      s = kUnknown;
    } else if (gpu >= 0) {
      s = rank_of[k] >= 0 ? rank_of[k] : kUnknown - 1;
    } else if (!binding.empty()) {
      std::vector<int> cpus = topo.nics()[k].cpus;
      std::sort(cpus.begin(), cpus.end());
      std::vector<int> inter;
      std::set_intersection(cpus.begin(), cpus.end(), binding.begin(), binding.end(),
                            std::back_inserter(inter));
      s = cpus.empty() ? 3 : inter.size() == binding.size() ? 0 : !inter.empty() ? 1 : 2;
    } else {
      s = 0;
    }
    if (ov) {
      auto it = std::find(ov->nics.begin(), ov->nics.end(), nic_names[i]);
      if (it == ov->nics.end())
        it = std::find_if(ov->nics.begin(), ov->nics.end(), [&](const std::string& o) {
          return base_name(o) == nic_names[i] || o == base_name(nic_names[i]);
        });
      if (it != ov->nics.end()) s = -(1L << 20) + (it - ov->nics.begin());
    }
    score[i] = s;
  }
  std::vector<int> idx(n);
  for (int i = 0; i < n; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] < score[b]; });
  for (int i : idx) out.nics.push_back(nic_names[i]);

  if (ov) {
    out.reason = "SLUICE_GPU_NIC_MAP entry for GPU " + ov->gpu + " (" + ov->gpu_bus_id + ")";
  } else if (gpu >= 0) {
    out.reason = "nearest to GPU " + std::to_string(gpu) + " (" + topo.gpus()[gpu].bus_id +
                 ") by PCIe/NUMA distance";
  } else if (!req.gpu_bus_id.empty()) {
    out.reason = "GPU " + req.gpu_bus_id + " not found in the topology; " +
                 (binding.empty() ? std::string("order unchanged") : "by CPU binding");
  } else if (!binding.empty()) {
    out.reason = "by this process's CPU binding (no GPU)";
  } else {
    out.reason = "no GPU and no CPU binding: order unchanged";
  }
  return out;
}

}  // namespace sluice::topo
