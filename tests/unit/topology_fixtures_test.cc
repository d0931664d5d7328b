// Topology on Sluice's own fixtures (tests/fixtures/*.xml, written by gen_fixtures.py), the
// failed-load path, and the locality lookup the plugin uses (including virtual rxe devices).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "sluice/topology/topology.h"

namespace {

using sluice::topo::PathClass;
using sluice::topo::Topology;
namespace fs = std::filesystem;

Topology load(const std::string& name) {
  auto r = Topology::load_xml_file(std::string(SLUICE_FIXTURES_DIR) + "/" + name);
  if (!r.is_ok()) {
    ADD_FAILURE() << name << ": " << r.status().message();
    std::abort();
  }
  return std::move(r).value();
}

std::vector<std::string> names(const Topology& t, const std::vector<int>& nics) {
  std::vector<std::string> v;
  for (int n : nics) v.push_back(t.nics()[n].name);
  return v;
}

std::vector<std::string> nearest(const Topology& t, int g) {
  std::vector<std::string> v;
  for (const auto& r : t.nearest_nics(g)) v.push_back(t.nics()[r.nic].name);
  return v;
}

std::string cls(const Topology& t, int g, const char* nic) {
  return path_class_name(t.classify(g, t.find_nic(nic)).cls);
}

TEST(TopologyFixtures, Hgx8GpuTwoSocketSwitches) {
  Topology t = load("hgx-8gpu-2socket-switches.xml");
  ASSERT_EQ(t.gpus().size(), 8u);
  ASSERT_EQ(t.nics().size(), 4u);
  EXPECT_EQ(t.package_count(), 2);
  // Names do not follow locality: mlx5_2 is beside GPU 0/1, mlx5_0 beside GPU 4/5.
  EXPECT_EQ(cls(t, 0, "mlx5_2"), "PIX");
  EXPECT_EQ(cls(t, 1, "mlx5_2"), "PXB");  // GPU1 is behind a second-level switch
  EXPECT_EQ(t.classify(1, t.find_nic("mlx5_2")).gpu_bridges, 3);
  EXPECT_EQ(cls(t, 0, "mlx5_3"), "NODE");
  EXPECT_EQ(cls(t, 0, "mlx5_0"), "SYS");
  EXPECT_FALSE(t.classify(0, t.find_nic("mlx5_0")).same_package);
  const std::vector<std::string> want = {"mlx5_2", "mlx5_2", "mlx5_3", "mlx5_3",
                                         "mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"};
  auto a = t.assign();
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(nearest(t, g), std::vector<std::string>{want[g]}) << "G" << g;
    EXPECT_EQ(names(t, a[g].nics), std::vector<std::string>{want[g]}) << "G" << g;
    EXPECT_EQ(t.gpus()[g].numa_node, g < 4 ? 0 : 1);
    EXPECT_EQ(t.gpus()[g].os_devices, std::vector<std::string>{"cuda" + std::to_string(g)});
  }
  EXPECT_EQ(a[1].cls, PathClass::kPXB);
  EXPECT_EQ(t.nics()[t.find_nic("mlx5_0")].numa_node, 1);
  EXPECT_EQ(t.nics()[t.find_nic("mlx5_0")].cpus, (std::vector<int>{4, 5, 6, 7}));
}

TEST(TopologyFixtures, OnlyNicOnOtherSocketNonContiguousNuma) {
  Topology t = load("nic-other-socket-numa0-8.xml");
  ASSERT_EQ(t.gpus().size(), 4u);
  ASSERT_EQ(t.nics().size(), 1u);
  ASSERT_EQ(t.numa_nodes().size(), 2u);
  EXPECT_EQ(t.numa_nodes()[0].os_index, 0);
  EXPECT_EQ(t.numa_nodes()[1].os_index, 8);
  EXPECT_EQ(t.nics()[0].numa_node, 8);
  EXPECT_EQ(cls(t, 0, "mlx5_0"), "SYS");
  EXPECT_EQ(cls(t, 1, "mlx5_0"), "SYS");
  EXPECT_EQ(cls(t, 2, "mlx5_0"), "NODE");
  EXPECT_EQ(cls(t, 3, "mlx5_0"), "PHB");
  for (const auto& ga : t.assign())
    EXPECT_EQ(names(t, ga.nics), std::vector<std::string>{"mlx5_0"});
}

TEST(TopologyFixtures, DualPortNicIsOneAdapterAcrossPciDomains) {
  Topology t = load("dual-port-nic-pci-domains.xml");
  ASSERT_EQ(t.gpus().size(), 2u);
  EXPECT_EQ(t.gpus()[0].bus_id, "0001:03:00.0");  // bus-id order, domains compared numerically
  EXPECT_EQ(t.gpus()[1].bus_id, "0002:03:00.0");
  EXPECT_EQ(t.find_gpu("0002:03:00.0"), 1);
  EXPECT_EQ(t.find_gpu("00000002:03:00.0"), 1);  // CUDA's 8-digit domain
  ASSERT_EQ(t.nics().size(), 3u);
  EXPECT_EQ(t.adapter_count(), 2);
  EXPECT_EQ(t.nics()[t.find_nic("mlx5_4")].adapter, t.nics()[t.find_nic("mlx5_9")].adapter);
  EXPECT_NE(t.nics()[t.find_nic("mlx5_4")].adapter, t.nics()[t.find_nic("mlx5_0")].adapter);
  EXPECT_EQ(cls(t, 1, "mlx5_4"), "PIX");
  EXPECT_EQ(cls(t, 1, "mlx5_9"), "PIX");
  EXPECT_EQ(cls(t, 0, "mlx5_4"), "NODE");
  auto a = t.assign();
  EXPECT_EQ(names(t, a[0].nics), std::vector<std::string>{"mlx5_0"});
  EXPECT_EQ(names(t, a[1].nics), (std::vector<std::string>{"mlx5_4", "mlx5_9"}));
  // mlx5_9's port is down: with active_only GPU1 keeps just mlx5_4.
  sluice::topo::RankOptions opt;
  opt.active_only = true;
  EXPECT_EQ(names(t, t.assign(opt)[1].nics), std::vector<std::string>{"mlx5_4"});
}

TEST(TopologyFixtures, NoRdmaNicAndNvSwitchIsNotAGpu) {
  Topology t = load("no-rdma-nic.xml");
  ASSERT_EQ(t.gpus().size(), 2u);  // VGA-class GPU counts, NVSwitch (class 0680) does not
  EXPECT_EQ(t.gpus()[0].class_id, 0x0300);
  EXPECT_TRUE(t.nics().empty());
  for (int g = 0; g < 2; ++g) {
    EXPECT_TRUE(t.nearest_nics(g).empty());
    EXPECT_TRUE(t.assign()[g].nics.empty());
  }
  EXPECT_NE(t.to_dot().find("GPU1"), std::string::npos);
}

TEST(TopologyFixtures, MoreNicsThanGpusSpreadEvenlyAndDeterministically) {
  Topology t = load("spread-2gpu-4nic-rxe.xml");
  ASSERT_EQ(t.nics().size(), 5u);
  for (int g = 0; g < 2; ++g) EXPECT_EQ(nearest(t, g).size(), 4u);
  auto a = t.assign();
  // Bus order of the NICs is mlx5_3, mlx5_2, mlx5_1, mlx5_0 (names reversed on purpose).
  EXPECT_EQ(names(t, a[0].nics), (std::vector<std::string>{"mlx5_3", "mlx5_1"}));
  EXPECT_EQ(names(t, a[1].nics), (std::vector<std::string>{"mlx5_2", "mlx5_0"}));
  for (int i = 0; i < 3; ++i) {
    auto b = t.assign();
    for (int g = 0; g < 2; ++g) EXPECT_EQ(a[g].nics, b[g].nics);
  }
}

TEST(TopologyFixtures, VirtualNicHasUnknownLocality) {
  Topology t = load("spread-2gpu-4nic-rxe.xml");
  int rxe = t.find_nic("rxe0");
  ASSERT_GE(rxe, 0);
  EXPECT_TRUE(t.nics()[rxe].bus_id.empty());
  EXPECT_EQ(t.nics()[rxe].numa_node, -1);
  EXPECT_EQ(t.classify(0, rxe).cls, PathClass::kUnknown);
  auto ranked = t.ranked_nics(0);
  EXPECT_EQ(ranked.back().nic, rxe);  // unknown locality ranks last
  auto loc = t.locality_of_nic(rxe);
  EXPECT_EQ(loc.numa_node, -1);
  EXPECT_TRUE(loc.cpus.empty());
  EXPECT_TRUE(t.locality_of_ibdev("rxe0", "/nonexistent-sysfs").pci_path.empty());
  EXPECT_EQ(t.locality_of_ibdev("rxe0", "/nonexistent-sysfs").numa_node, -1);
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("sluice-sysfs-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "devices/pci0000:90/0000:95:00.0");
    fs::create_directories(root_ / "devices/pci0000:90/0000:96:00.0");
    fs::create_directories(root_ / "devices/virtual/net/eth0");
    fs::create_directories(root_ / "class/infiniband/mlx5_1");
    fs::create_directories(root_ / "class/infiniband/mlx5_7");
    fs::create_directories(root_ / "class/infiniband/rxe0");
    fs::create_directories(root_ / "class/infiniband/rxe1");
    fs::create_directory_symlink(root_ / "devices/pci0000:90/0000:95:00.0",
                                 root_ / "class/infiniband/mlx5_1/device");
    // A device hwloc does not know: locality from sysfs.
    fs::create_directory_symlink(root_ / "devices/pci0000:90/0000:96:00.0",
                                 root_ / "class/infiniband/mlx5_7/device");
    std::ofstream(root_ / "devices/pci0000:90/0000:96:00.0/numa_node") << "1\n";
    std::ofstream(root_ / "devices/pci0000:90/0000:96:00.0/local_cpulist") << "4-5,7\n";
    // rxe0 has no device link; rxe1's points at a non-PCI device.
    fs::create_directory_symlink(root_ / "devices/virtual/net/eth0",
                                 root_ / "class/infiniband/rxe1/device");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(FakeSysfs, LocalityOfIbdev) {
  Topology t = load("hgx-8gpu-2socket-switches.xml");
  auto l = t.locality_of_ibdev("mlx5_1", root_.string());
  EXPECT_EQ(l.pci_path, fs::canonical(root_ / "devices/pci0000:90/0000:95:00.0").string());
  EXPECT_EQ(l.numa_node, 1);
  EXPECT_EQ(l.cpus, (std::vector<int>{4, 5, 6, 7}));

  auto s = t.locality_of_ibdev("mlx5_7", root_.string());
  EXPECT_FALSE(s.pci_path.empty());
  EXPECT_EQ(s.numa_node, 1);
  EXPECT_EQ(s.cpus, (std::vector<int>{4, 5, 7}));

  for (const char* v : {"rxe0", "rxe1", "nope", "", "../x"}) {
    auto u = t.locality_of_ibdev(v, root_.string());
    EXPECT_TRUE(u.pci_path.empty()) << v;
    EXPECT_EQ(u.numa_node, -1) << v;
    EXPECT_TRUE(u.cpus.empty()) << v;
  }
  // The result is core's DeviceLocality, usable as a LocalityProvider directly.
  sluice::LocalityProvider p = [&](const sluice::Config&, const std::string& n) {
    return t.locality_of_ibdev(n, root_.string());
  };
  EXPECT_EQ(p(sluice::Config{}, "mlx5_1").numa_node, 1);
}

TEST(TopologyLoad, FailedXmlLoadIsAnErrorNeverTheLiveMachine) {
  auto missing = Topology::load_xml_file("/nonexistent/dir/topology.xml");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/topology.xml"), std::string::npos);

  // Also with HWLOC_XMLFILE pointing elsewhere: no silent fallback to it.
  ::setenv("HWLOC_XMLFILE", (std::string(SLUICE_FIXTURES_DIR) + "/no-rdma-nic.xml").c_str(), 1);
  fs::path garbage = fs::temp_directory_path() / ("sluice-garbage-" + std::to_string(::getpid()));
  std::ofstream(garbage) << "this is not <xml";
  auto bad = Topology::load_xml_file(garbage.string());
  EXPECT_FALSE(bad.is_ok());
  auto empty = Topology::load_xml_buffer("");
  EXPECT_FALSE(empty.is_ok());
  ::unsetenv("HWLOC_XMLFILE");
  fs::remove(garbage);
}

std::string read_fixture(const std::string& name) {
  std::ifstream f(std::string(SLUICE_FIXTURES_DIR) + "/" + name);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Inputs the topology_xml fuzz target found (their full files are in fuzz/corpus/topology_xml/).
TEST(TopologyLoad, GpuAtAnImpossiblePciAddressIsRejected) {
  const std::string xml = read_fixture("dual-port-nic-pci-domains.xml");
  ASSERT_NE(xml.find("pci_busid=\"0002:03:00.0\""), std::string::npos);
  auto r = Topology::load_xml_buffer(
      replace_all(xml, "pci_busid=\"0002:03:00.0\"", "pci_busid=\"0002:03:20.0\""), "<dev20>");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("0002:03:20.0"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("not a PCI address"), std::string::npos);
}

TEST(TopologyLoad, BridgeTypeOutsideHwlocsEnumIsAPlainBridge) {
  // hwloc keeps bridge_type="2-1" as an out-of-range enum value; it must read as "not a host
  // bridge" (a sanitizer build fails here if the value is loaded as the enum).
  const std::string xml = read_fixture("dual-port-nic-pci-domains.xml");
  auto base = Topology::load_xml_buffer(xml, "<base>");
  auto odd = Topology::load_xml_buffer(
      replace_all(xml, "bridge_type=\"1-1\"", "bridge_type=\"2-1\""), "<bridge2>");
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  ASSERT_TRUE(odd.is_ok()) << odd.status().message();
  ASSERT_EQ(odd.value().gpus().size(), base.value().gpus().size());
  EXPECT_NE(odd.value().to_dot().find("PCIBridge"), std::string::npos);
  for (int g = 0; g < static_cast<int>(base.value().gpus().size()); ++g)
    for (int n = 0; n < static_cast<int>(base.value().nics().size()); ++n)
      EXPECT_EQ(odd.value().classify(g, n).cls, base.value().classify(g, n).cls)
          << "GPU " << g << " NIC " << n;
}

TEST(TopologyLoad, MalformedBitmapIsRefusedBeforeHwlocReadsIt) {
  // hwloc 2.9 abort()s (an assert in hwloc_bitmap_sscanf) on a bitmap that starts with a comma;
  // the fuzzer found complete_cpuset=",x00000008". Every *cpuset / *nodeset attribute is checked.
  const std::string xml = read_fixture("dual-port-nic-pci-domains.xml");
  const std::string from = "complete_cpuset=\"0x00000008\"";
  ASSERT_NE(xml.find(from), std::string::npos);
  for (const char* bad :
       {"complete_cpuset=\",x00000008\"", "complete_cpuset=\",0x00000008\"", "complete_cpuset=\"\"",
        "complete_cpuset=\"8\"", "complete_cpuset=\"0xzz\"", "complete_cpuset=\"0x\"",
        "complete_cpuset=\"0x00000008,x1\"", "complete_cpuset=',0x8'",
        "complete_cpuset = \",0x8\""}) {
    SCOPED_TRACE(bad);
    auto r = Topology::load_xml_buffer(replace_all(xml, from, bad), "<bitmap>");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("complete_cpuset="), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("is not a bitmap"), std::string::npos);
  }
  // What hwloc itself writes loads: empty zero groups after the first, the full set, and an
  // infinite prefix.
  for (const char* good :
       {"complete_cpuset=\"0x00000008,,0x0\"", "complete_cpuset=\"0x00000000,0x00000008\"",
        "complete_cpuset=\"0xf...f\"", "complete_cpuset=\"0xf...f,0x00000008\""}) {
    SCOPED_TRACE(good);
    auto r = Topology::load_xml_buffer(replace_all(xml, from, good), "<bitmap>");
    EXPECT_TRUE(r.is_ok()) << r.status().message();
  }
}

TEST(TopologyLoad, PuOrNumaNodeWithoutASaneOsIndexIsRefused) {
  // Without an os_index (or with a huge one) hwloc 2.9 allocates and clears 512 MiB for one bit;
  // the fuzzer timed out on a PU whose os_index attribute name was garbled.
  const std::string xml = read_fixture("dual-port-nic-pci-domains.xml");
  const std::string pu = "<object type=\"PU\" os_index=\"1\"";
  const std::string numa = "<object type=\"NUMANode\" os_index=\"0\"";
  ASSERT_NE(xml.find(pu), std::string::npos);
  ASSERT_NE(xml.find(numa), std::string::npos);
  for (auto [from, to, says] :
       {std::tuple{pu, "<object type=\"PU\" os:_index=\"1\"", "no os_index"},
        std::tuple{pu, "<object type=\"pu\" os:_index=\"1\"", "no os_index"},
        std::tuple{pu, "<object type=\"PU\" os_index=\"4294967295\"", "os_index=\"4294967295\""},
        std::tuple{pu, "<object type=\"PU\" os_index=\"1048576\"", "os_index=\"1048576\""},
        std::tuple{pu, "<object type=\"PU\" os_index=\"-1\"", "os_index=\"-1\""},
        std::tuple{pu, "<object type=\"&#80;U\" os_index=\"1\"", "XML entity"},
        std::tuple{numa, "<object type=\"NUMANode\" os_index=\"\"", "os_index=\"\""}}) {
    SCOPED_TRACE(to);
    auto r = Topology::load_xml_buffer(replace_all(xml, from, to), "<os_index>");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  }
  auto big = Topology::load_xml_buffer(
      replace_all(xml, pu, "<object type=\"PU\" os_index=\"1048575\""), "<os_index>");
  EXPECT_TRUE(big.is_ok()) << big.status().message();
}

TEST(TopologyLoad, XmlBufferAndPciBusIdNormalization) {
  auto r = Topology::load_xml_buffer(read_fixture("dual-port-nic-pci-domains.xml"));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r.value().is_live());
  EXPECT_EQ(r.value().gpus().size(), 2u);
  using sluice::topo::normalize_pci_bus_id;
  EXPECT_EQ(normalize_pci_bus_id("4E:00.0"), "0000:4e:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0009:01:00.1"), "0009:01:00.1");
  EXPECT_EQ(normalize_pci_bus_id("mlx5_0"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:4e:00"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:4e:20.0"), "");
}

TEST(TopologyLoad, LiveMachineLoadsWithoutCrashing) {
  auto r = Topology::load_live();
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r.value().is_live());
  EXPECT_FALSE(r.value().numa_nodes().empty());
  // Whatever the machine has, unknown devices are unknown, never a crash.
  EXPECT_EQ(r.value().locality_of_ibdev("sluice-no-such-device").numa_node, -1);
  for (const auto& n : r.value().nics()) (void)r.value().locality_of_ibdev(n.name);
  (void)r.value().to_dot();
}

}  // namespace
