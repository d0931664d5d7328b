// RAII owners for verbs objects. Each deleter calls the matching destroy function, logs a non-zero
// return and never throws. Declare owners in dependency order (context, PD, CQ, MRs, QPs) so that
// C++'s reverse-order destruction tears them down correctly: QPs before CQs, MRs before the PD, the
// PD before the context.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

namespace sluice::verbs {

struct ContextDeleter {
  void operator()(ibv_context* c) const;
};
struct PdDeleter {
  void operator()(ibv_pd* p) const;
};
struct CqDeleter {
  void operator()(ibv_cq* c) const;
};
struct QpDeleter {
  void operator()(ibv_qp* q) const;
};
struct MrDeleter {
  void operator()(ibv_mr* m) const;
};
struct DeviceListDeleter {
  void operator()(ibv_device** l) const;
};

using Context = std::unique_ptr<ibv_context, ContextDeleter>;
using Pd = std::unique_ptr<ibv_pd, PdDeleter>;
using Cq = std::unique_ptr<ibv_cq, CqDeleter>;
using Qp = std::unique_ptr<ibv_qp, QpDeleter>;
using Mr = std::unique_ptr<ibv_mr, MrDeleter>;
using DeviceList = std::unique_ptr<ibv_device*, DeviceListDeleter>;

const char* qp_state_name(ibv_qp_state s);
const char* mtu_name(ibv_mtu m);  // "1024"
int mtu_bytes(ibv_mtu m);
const char* link_layer_name(uint8_t link_layer);  // "InfiniBand", "Ethernet"
// Likely cause of a bad work completion, one line ("peer unreachable: ... check GID/routing").
const char* wc_status_hint(ibv_wc_status s);

}  // namespace sluice::verbs
