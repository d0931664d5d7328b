// device_max_comms (api.h): what a comm on a device takes, as create_qps (comm_setup.cc) and the
// flush (datapath/flush.cc) create it, against the device's limits (base/comm_capacity.h).
#include "sluice/core/base/comm_capacity.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "comm/engine.h"
#include "sluice/core/api.h"

namespace sluice {

Status device_max_comms(int dev, int* out, std::string* why) {
  *out = 0;
  const Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "device_max_comms called before init");
  const std::vector<Device*> members = e->members_of(dev);
  if (members.empty())
    return Status(Code::kInvalidArgument, "maxComms: no device " + std::to_string(dev));
  const Config& cfg = e->config();
  CapacityInput in;
  in.members = static_cast<int>(members.size());
  in.paths = in.members;  // both sides alike: a comm has max(ours, theirs) paths
  in.qps_per_path = std::max(cfg.qps_per_connection, 1);
  for (const Device* d : members) {
    if (std::none_of(in.adapters.begin(), in.adapters.end(),
                     [&](const CapacityAdapter& a) { return a.name == d->adapter->name; })) {
      ibv_device_attr attr{};
      if (ibv_query_device(d->adapter->ctx.get(), &attr) != 0)
        return errno_status(Code::kSystemError, "maxComms: ibv_query_device on " + d->name, errno);
      in.adapters.push_back({d->adapter->name, attr.max_qp, attr.max_cq});
    }
    // A receive comm creates its flush lanes at its first flush of GPU memory (or of any memory
    // with NCCL_NET_FORCE_FLUSH), unless NCCL_GDR_FLUSH_DISABLE.
    in.flush = in.flush || (!cfg.gdr_flush_disable && (d->gdr.cuda || cfg.force_flush));
  }
  const Capacity c = comm_capacity(in);
  *out = c.max_comms;
  if (why != nullptr) *why = c.text;
  return Status::ok();
}

}  // namespace sluice
