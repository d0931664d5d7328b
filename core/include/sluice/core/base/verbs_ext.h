// Verbs entry points newer than the oldest rdma-core Sluice supports (kRdmaCoreFloor), resolved at
// run time with dlvsym on the libibverbs already loaded, so that libnccl-net-sluice.so loads on
// every supported rdma-core. A missing one is null; its feature is off and says so. Everything
// else Sluice calls is at or below the floor (tests/abi/check_symbol_floor.cmake checks the
// versioned symbols the .so imports).
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::verbs {

// rdma-core 28 (libibverbs IBVERBS_1.8, librdmacm RDMACM_1.2): Ubuntu 20.04, RHEL/Rocky 8.2.
inline constexpr int kRdmaCoreFloor = 28;
inline constexpr const char* kIbverbsFloor = "IBVERBS_1.8";
inline constexpr const char* kRdmacmFloor = "RDMACM_1.2";

struct Ext {
  // IBVERBS_1.12, rdma-core 34.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                           int access) = nullptr;
  // IBVERBS_1.10, rdma-core 31.
  int (*query_ece)(ibv_qp* qp, ibv_ece* ece) = nullptr;
  int (*set_ece)(ibv_qp* qp, ibv_ece* ece) = nullptr;
  // IBVERBS_1.11, rdma-core 32 (what verbs.h's inline ibv_query_gid_table calls).
  ssize_t (*query_gid_table)(ibv_context* ctx, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) = nullptr;
};

// Resolved once (thread-safe).
const Ext& ext();
// SLUICE_TEST_HIDE_VERBS (tests only): "name,..." entry points treated as missing from now on, as
// on an older rdma-core. Called at engine start and by sluice-info, before the entry points are
// used.
void hide_for_test(const std::string& names);

// "ibv_reg_dmabuf_mr (IBVERBS_1.12, rdma-core 34)": which rdma-core first has `name`.
std::string ext_origin(const char* name);
// One line: each entry point found or missing, for INFO and sluice-info.
std::string ext_summary();

}  // namespace sluice::verbs
