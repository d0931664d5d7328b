// What a verbs port tells about itself, read the same way by the engine and by sluice-info.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "sluice/core/config.h"
#include "sluice/core/net_addr.h"

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

// The automatic GID choice's policy from the configuration (NCCL_IB_GID_INDEX, _ADDR_FAMILY,
// _ADDR_RANGE, _ROCE_VERSION_NUM).
GidPolicy gid_policy(const Config& cfg);

}  // namespace sluice
