#include "sluice/core/base/verbs_ext.h"

#include <dlfcn.h>

#include <cstring>
#include <string_view>

namespace sluice::verbs {
namespace {

struct Entry {
  const char* name;
  const char* version;
  int rdma_core;
};
constexpr Entry kEntries[] = {
    {"ibv_reg_dmabuf_mr", "IBVERBS_1.12", 34},
    {"ibv_query_ece", "IBVERBS_1.10", 31},
    {"ibv_set_ece", "IBVERBS_1.10", 31},
    {"_ibv_query_gid_table", "IBVERBS_1.11", 32},
};

void* resolve(void* lib, const Entry& e) {
  if (lib == nullptr) return nullptr;
  return dlvsym(lib, e.name, e.version);
}

bool listed(std::string_view list, std::string_view want) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == want) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

Ext load() {
  Ext x;
  // The plugin links libibverbs, so it is loaded already: take a reference, never load another.
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  x.reg_dmabuf_mr = reinterpret_cast<decltype(x.reg_dmabuf_mr)>(resolve(lib, kEntries[0]));
  x.query_ece = reinterpret_cast<decltype(x.query_ece)>(resolve(lib, kEntries[1]));
  x.set_ece = reinterpret_cast<decltype(x.set_ece)>(resolve(lib, kEntries[2]));
  x.query_gid_table = reinterpret_cast<decltype(x.query_gid_table)>(resolve(lib, kEntries[3]));
  // The reference stays: the pointers must outlive every caller (libibverbs is never unloaded
  // while the plugin, which links it, is loaded).
  return x;
}

// Written only by hide_for_test, before any use (engine start, sluice-info start).
Ext& mutable_ext() {
  static Ext x = load();
  return x;
}

}  // namespace

const Ext& ext() {
  return mutable_ext();
}

void hide_for_test(const std::string& names) {
  if (names.empty()) return;
  Ext& x = mutable_ext();
  if (listed(names, kEntries[0].name)) x.reg_dmabuf_mr = nullptr;
  if (listed(names, kEntries[1].name)) x.query_ece = nullptr;
  if (listed(names, kEntries[2].name)) x.set_ece = nullptr;
  if (listed(names, kEntries[3].name)) x.query_gid_table = nullptr;
}

std::string ext_origin(const char* name) {
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, name) == 0)
      return std::string(name) + " (" + e.version + ", rdma-core " + std::to_string(e.rdma_core) +
             ")";
  }
  return name;
}

std::string ext_summary() {
  const Ext& x = ext();
  const void* got[] = {
      reinterpret_cast<const void*>(x.reg_dmabuf_mr), reinterpret_cast<const void*>(x.query_ece),
      reinterpret_cast<const void*>(x.set_ece), reinterpret_cast<const void*>(x.query_gid_table)};
  std::string s =
      "rdma-core entry points beyond the floor (rdma-core " + std::to_string(kRdmaCoreFloor) + "):";
  for (size_t i = 0; i < std::size(kEntries); ++i) {
    s += std::string(i ? ", " : " ") + kEntries[i].name + (got[i] ? " yes" : " no") + " (" +
         kEntries[i].version + ")";
  }
  return s;
}

}  // namespace sluice::verbs
