// The ranking on every real machine in ../shared/topologies/, against the answers in its README
// (GPU -> NIC class matrices, nearest NICs, NUMA nodes). Those files are read in place, never
// copied here. Skipped, with the reason, where the folder is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sluice/topology/topology.h"

namespace {

using sluice::topo::PathClass;
using sluice::topo::RankOptions;
using sluice::topo::Topology;

struct Expected {
  std::string file;
  std::vector<std::string> gpus;  // bus ids in G0.. order
  std::vector<int> gpu_numa;
  std::vector<std::string> nics;  // README column order
  std::vector<int> nic_numa;
  std::vector<std::string> classes;  // one row per GPU: "PIX PIX SYS* SYS" (SYS* = same pkg)
  std::vector<std::string> nearest;  // one row per GPU: "a,b" (set)
  std::vector<std::string> first;    // first NIC of the ranking per GPU ("" = no NIC)
  int numa_nodes = 0;
  int packages = 0;
};

std::string dir() {
  return SLUICE_SHARED_TOPOLOGIES_DIR;
}

std::vector<std::string> words(const std::string& s, char sep = ' ') {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string w;
  while (std::getline(ss, w, sep))
    if (!w.empty()) out.push_back(w);
  return out;
}

const std::vector<Expected>& expectations() {
  static const std::vector<Expected> e = {
      {"aws-p6-b200.48xlarge-8xB200-8xEFA-2xCX7.xml",
       {"0000:51:00.0", "0000:52:00.0", "0000:62:00.0", "0000:63:00.0", "0000:75:00.0",
        "0000:76:00.0", "0000:86:00.0", "0000:87:00.0"},
       {0, 0, 0, 0, 1, 1, 1, 1},
       {"rdmap79s0", "rdmap80s0", "rdmap96s0", "rdmap97s0", "rdmap113s0", "rdmap114s0",
        "ibp115s0f0", "ibp116s0f0", "rdmap132s0", "rdmap133s0"},
       {0, 0, 0, 0, 1, 1, 1, 1, 1, 1},
       {"PIX PIX NODE NODE SYS SYS SYS SYS SYS SYS", "PIX PIX NODE NODE SYS SYS SYS SYS SYS SYS",
        "NODE NODE PIX PIX SYS SYS SYS SYS SYS SYS", "NODE NODE PIX PIX SYS SYS SYS SYS SYS SYS",
        "SYS SYS SYS SYS PIX PIX PIX PIX NODE NODE", "SYS SYS SYS SYS PIX PIX PIX PIX NODE NODE",
        "SYS SYS SYS SYS NODE NODE NODE NODE PIX PIX",
        "SYS SYS SYS SYS NODE NODE NODE NODE PIX PIX"},
       {"rdmap79s0,rdmap80s0", "rdmap79s0,rdmap80s0", "rdmap96s0,rdmap97s0", "rdmap96s0,rdmap97s0",
        "rdmap113s0,rdmap114s0,ibp115s0f0,ibp116s0f0",
        "rdmap113s0,rdmap114s0,ibp115s0f0,ibp116s0f0", "rdmap132s0,rdmap133s0",
        "rdmap132s0,rdmap133s0"},
       // Bandwidth tie-break: EFA (63 GB/s) before ConnectX-7 (3.94 GB/s) for G4/G5.
       {"rdmap79s0", "rdmap79s0", "rdmap96s0", "rdmap96s0", "rdmap113s0", "rdmap113s0",
        "rdmap132s0", "rdmap132s0"},
       2,
       2},
      {"aws-p4d.24xlarge-8xA100-4xEFA.xml",
       {"0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0", "0000:20:1d.0", "0000:90:1c.0",
        "0000:90:1d.0", "0000:a0:1c.0", "0000:a0:1d.0"},
       {0, 0, 0, 0, 1, 1, 1, 1},
       {"rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"},
       {0, 0, 1, 1},
       {"PHB NODE SYS SYS", "PHB NODE SYS SYS", "NODE PHB SYS SYS", "NODE PHB SYS SYS",
        "SYS SYS PHB NODE", "SYS SYS PHB NODE", "SYS SYS NODE PHB", "SYS SYS NODE PHB"},
       {"rdmap16s27", "rdmap16s27", "rdmap32s27", "rdmap32s27", "rdmap144s27", "rdmap144s27",
        "rdmap160s27", "rdmap160s27"},
       {"rdmap16s27", "rdmap16s27", "rdmap32s27", "rdmap32s27", "rdmap144s27", "rdmap144s27",
        "rdmap160s27", "rdmap160s27"},
       2,
       2},
      {"dell-xe8640-4xH100-4xmlx5.xml",
       {"0000:4e:00.0", "0000:5f:00.0", "0000:cb:00.0", "0000:db:00.0"},
       {3, 1, 7, 5},
       {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"},
       {3, 3, 1, 5},
       {"PIX PIX SYS* SYS", "SYS* SYS* PIX SYS", "SYS SYS SYS SYS*", "SYS SYS SYS PIX"},
       {"mlx5_0,mlx5_1", "mlx5_2", "mlx5_0,mlx5_1,mlx5_2,mlx5_3", "mlx5_3"},
       // G2: all SYS; the deeper common ancestor ("same pkg") wins the tie.
       {"mlx5_0", "mlx5_2", "mlx5_3", "mlx5_3"},
       8,
       2},
      {"aws-g4dn.metal-8xT4-1xEFA.xml",
       {"0000:18:00.0", "0000:19:00.0", "0000:35:00.0", "0000:36:00.0", "0000:e7:00.0",
        "0000:e8:00.0", "0000:f4:00.0", "0000:f5:00.0"},
       {0, 0, 0, 0, 1, 1, 1, 1},
       {"rdmap197s0"},
       {1},
       {"SYS", "SYS", "SYS", "SYS", "NODE", "NODE", "NODE", "NODE"},
       {"rdmap197s0", "rdmap197s0", "rdmap197s0", "rdmap197s0", "rdmap197s0", "rdmap197s0",
        "rdmap197s0", "rdmap197s0"},
       {"rdmap197s0", "rdmap197s0", "rdmap197s0", "rdmap197s0", "rdmap197s0", "rdmap197s0",
        "rdmap197s0", "rdmap197s0"},
       2,
       2},
      {"deep-est-esb-1xV100-1xCX5.xml",
       {"0000:65:00.0"},
       {0},
       {"mlx5_0"},
       {0},
       {"NODE"},
       {"mlx5_0"},
       {"mlx5_0"},
       1,
       1},
      {"nvidia-dgx2-16xV100-no-rdma-nic.xml",
       {"0000:34:00.0", "0000:36:00.0", "0000:39:00.0", "0000:3b:00.0", "0000:57:00.0",
        "0000:59:00.0", "0000:5c:00.0", "0000:5e:00.0", "0000:b7:00.0", "0000:b9:00.0",
        "0000:bc:00.0", "0000:be:00.0", "0000:e0:00.0", "0000:e2:00.0", "0000:e5:00.0",
        "0000:e7:00.0"},
       {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
       {},
       {},
       {"", "", "", "", "", "", "", "", "", "", "", "", "", "", "", ""},
       {"", "", "", "", "", "", "", "", "", "", "", "", "", "", "", ""},
       {"", "", "", "", "", "", "", "", "", "", "", "", "", "", "", ""},
       2,
       2},
  };
  return e;
}

class SharedTopology : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!std::filesystem::is_directory(dir()))
      GTEST_SKIP() << "shared topologies folder " << dir()
                   << " is absent (it exists in CI); nothing to check against";
  }
};

TEST_P(SharedTopology, MatchesReadme) {
  const Expected& ex = expectations()[GetParam()];
  SCOPED_TRACE(ex.file);
  std::string path = dir() + "/" + ex.file;
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing from the shared folder";
  auto r = Topology::load_xml_file(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Topology& t = r.value();

  EXPECT_EQ(t.package_count(), ex.packages);
  EXPECT_EQ(static_cast<int>(t.numa_nodes().size()), ex.numa_nodes);
  ASSERT_EQ(t.gpus().size(), ex.gpus.size());
  ASSERT_EQ(t.nics().size(), ex.nics.size());
  for (size_t g = 0; g < ex.gpus.size(); ++g) {
    EXPECT_EQ(t.gpus()[g].bus_id, ex.gpus[g]) << "G" << g;
    EXPECT_EQ(t.gpus()[g].numa_node, ex.gpu_numa[g]) << "G" << g;
  }
  std::vector<int> col(ex.nics.size());
  for (size_t n = 0; n < ex.nics.size(); ++n) {
    col[n] = t.find_nic(ex.nics[n]);
    ASSERT_GE(col[n], 0) << ex.nics[n];
    EXPECT_EQ(t.nics()[col[n]].numa_node, ex.nic_numa[n]) << ex.nics[n];
  }
  for (size_t g = 0; g < ex.gpus.size(); ++g) {
    auto row = words(ex.classes[g]);
    ASSERT_EQ(row.size(), ex.nics.size());
    for (size_t n = 0; n < ex.nics.size(); ++n) {
      auto info = t.classify(static_cast<int>(g), col[n]);
      bool same_pkg = row[n].back() == '*';
      std::string want = same_pkg ? row[n].substr(0, row[n].size() - 1) : row[n];
      EXPECT_EQ(path_class_name(info.cls), want) << "G" << g << " -> " << ex.nics[n];
      if (want == "SYS") {
        EXPECT_EQ(info.same_package, same_pkg) << "G" << g << " -> " << ex.nics[n];
      }
    }
    std::set<std::string> want_near;
    for (auto& w : words(ex.nearest[g], ',')) want_near.insert(w);
    std::set<std::string> got_near;
    for (auto& rn : t.nearest_nics(static_cast<int>(g))) got_near.insert(t.nics()[rn.nic].name);
    EXPECT_EQ(got_near, want_near) << "G" << g;
    auto ranked = t.ranked_nics(static_cast<int>(g));
    if (ex.first[g].empty()) {
      EXPECT_TRUE(ranked.empty());
    } else {
      ASSERT_FALSE(ranked.empty());
      EXPECT_EQ(t.nics()[ranked.front().nic].name, ex.first[g]) << "G" << g;
    }
  }

  // The whole-machine assignment gives every GPU a NIC from its nearest set (when there is one),
  // and is deterministic.
  auto a1 = t.assign();
  auto a2 = t.assign();
  ASSERT_EQ(a1.size(), ex.gpus.size());
  for (size_t g = 0; g < a1.size(); ++g) {
    EXPECT_EQ(a1[g].nics, a2[g].nics);
    if (ex.nics.empty()) {
      EXPECT_TRUE(a1[g].nics.empty());
      continue;
    }
    ASSERT_FALSE(a1[g].nics.empty()) << "G" << g;
    std::set<std::string> want_near;
    for (auto& w : words(ex.nearest[g], ',')) want_near.insert(w);
    for (int n : a1[g].nics) EXPECT_TRUE(want_near.count(t.nics()[n].name)) << "G" << g;
  }
}

INSTANTIATE_TEST_SUITE_P(Readme, SharedTopology, ::testing::Range(0, 6),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n = expectations()[info.param].file;
                           n = n.substr(0, n.find('-', n.find('-') + 1));
                           for (auto& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n + "_" + std::to_string(info.param);
                         });

TEST(SharedTopologyExtra, EveryXmlInFolderLoadsAndIsCovered) {
  if (!std::filesystem::is_directory(dir())) GTEST_SKIP() << dir() << " is absent";
  std::set<std::string> covered;
  for (const auto& e : expectations()) covered.insert(e.file);
  for (const auto& entry : std::filesystem::directory_iterator(dir())) {
    if (entry.path().extension() != ".xml") continue;
    auto r = Topology::load_xml_file(entry.path().string());
    EXPECT_TRUE(r.is_ok()) << entry.path() << ": " << r.status().message();
    EXPECT_TRUE(covered.count(entry.path().filename().string()))
        << entry.path() << " has no expected answers encoded in this test";
  }
}

TEST(SharedTopologyExtra, DellActiveOnlyGivesMlx5_0ToEveryGpu) {
  std::string path = dir() + "/dell-xe8640-4xH100-4xmlx5.xml";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto r = Topology::load_xml_file(path);
  ASSERT_TRUE(r.is_ok());
  RankOptions opt;
  opt.active_only = true;  // only mlx5_0's port is ACTIVE in this export
  for (const auto& ga : r.value().assign(opt)) {
    ASSERT_EQ(ga.nics.size(), 1u);
    EXPECT_EQ(r.value().nics()[ga.nics[0]].name, "mlx5_0");
  }
  // The dual-port ConnectX-6 is one adapter: 4 NICs, 3 adapters.
  EXPECT_EQ(r.value().adapter_count(), 3);
  EXPECT_EQ(r.value().nics()[r.value().find_nic("mlx5_0")].adapter,
            r.value().nics()[r.value().find_nic("mlx5_1")].adapter);
}

TEST(SharedTopologyExtra, P6SpreadsFourPixNicsOverG4AndG5) {
  std::string path = dir() + "/aws-p6-b200.48xlarge-8xB200-8xEFA-2xCX7.xml";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto r = Topology::load_xml_file(path);
  ASSERT_TRUE(r.is_ok());
  const Topology& t = r.value();
  auto a = t.assign();
  auto names = [&](int g) {
    std::vector<std::string> v;
    for (int n : a[g].nics) v.push_back(t.nics()[n].name);
    return v;
  };
  EXPECT_EQ(names(0), (std::vector<std::string>{"rdmap79s0"}));
  EXPECT_EQ(names(1), (std::vector<std::string>{"rdmap80s0"}));
  EXPECT_EQ(names(4), (std::vector<std::string>{"rdmap113s0", "ibp115s0f0"}));
  EXPECT_EQ(names(5), (std::vector<std::string>{"rdmap114s0", "ibp116s0f0"}));
}

}  // namespace
