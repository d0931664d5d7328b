// What a verbs port tells about itself, read the same way by the engine and by sluice-info.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "sluice/core/base/config.h"
#include "sluice/core/base/net_addr.h"

namespace sluice {

// Port speed in Mbps: per-lane rate (active_speed encoding) x lanes (active_width encoding).
int port_speed_mbps(uint8_t active_speed, uint8_t active_width);

// The GID type as sysfs writes it ("RoCE v2", "IB/RoCE v1"), "" when unreadable (containers).
std::string gid_type_text(const std::string& dev, int port, int index);
// 2, 1, or 0 = unknown, from gid_type_text's string.
int roce_version_of(const std::string& type_text);

// Every non-zero GID of the port, with its RoCE version.
std::vector<GidEntry> read_gid_table(ibv_context* ctx, const std::string& dev, uint8_t port,
                                     int tbl_len);

// "InfiniBand" (IB and RoCE ports), "iWARP", "usNIC", ... as ibv_devinfo names the transport.
const char* transport_name(ibv_transport_type t);

// Why Sluice cannot use a device of verbs transport `t`, "" when it can: the one decision, made by
// the engine's discovery (such a device is not offered to NCCL, with a WARN) and shown by
// sluice-info. iWARP: Sluice ends every message with RDMA WRITE with immediate data, whose
// immediate value completes the receiver's posted receive; iWARP (RDMAP, RFC 5040) has no such
// operation (siw rejects the opcode), and no iWARP data path exists yet. `dev` names the device.
std::string unusable_transport_reason(ibv_transport_type t, const std::string& dev);

// The IP addresses of port `port` of device `dev` (its ibv name): what sluice-info lists for the
// port and what rdma_cm binds for it (choose_cm_address). RoCE (`ethernet`): each GID of `gids`,
// once, in GID index order (a RoCE GID is an IP address of the port's netdev, or of one stacked on
// it: VLAN, macvlan), link-local ones marked; iWARP: the addresses of the port's netdev (sysfs
// gid_attrs/ndevs/0; its GIDs are MAC-based); InfiniBand: the addresses of the device's IPoIB
// netdevs for this port (sysfs device/net/*, dev_port = port - 1 where the file exists).
std::vector<PortAddr> port_addresses(const std::string& dev, int port, bool ethernet, bool iwarp,
                                     const std::vector<GidEntry>& gids);

// The automatic GID choice's policy from the configuration (NCCL_IB_GID_INDEX, _ADDR_FAMILY,
// _ADDR_RANGE, _ROCE_VERSION_NUM).
GidPolicy gid_policy(const Config& cfg);

}  // namespace sluice
