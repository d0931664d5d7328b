// QP and comm-memory setup shared by both sides of connection setup (connect.cc, listener.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "comm/qp_bringup.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

// The last byte of the handshake: the connector's QPs are at RTS.
inline constexpr uint8_t kReadyByte = 0x5a;

// Also offers this side's failover path-message set (local_path_msg_set: wire.h
// kMetaFeaturePathSet2).
void fill_local_meta(const Device& d, uint8_t role, const wire::Nonce& nonce, wire::Meta* m);
// The failover path-message set this side offers (wire.h): this build's, or
// SLUICE_TEST_PATH_MSG_SET's.
int local_path_msg_set();
// Creates the CQ and `nqps` RC QPs at INIT and records their QPN/PSN in `m`.
Status create_qps(Conn& c, int nqps, const QpCaps& caps, int cqe, wire::Meta* m);
// Checks the peer's metadata against ours (wire::check_peer_meta) and records its device and GID.
// SLUICE_FLOW_LABEL: gives c.flow a spread set over the connection's QPs (RoCE; on InfiniBand one
// INFO per process says it does not apply) and logs the labels and ports, one INFO line.
void choose_flow_labels(Conn& c, const wire::Meta& local, const wire::Meta& remote);
Status accept_peer_meta(Conn& c, const wire::Meta& local, const wire::Meta& remote);
// RTR and RTS for every QP against the peer's metadata (accept_peer_meta first). Each QP's RTR
// uses its path's members (wire.h): the local member's port and GID index, the remote member's
// GID, LID and MTU; `lx`/`rx` are the sides' member extensions (members_of_meta for a plain Meta).
Status connect_qps(Conn& c, const wire::Meta& local, const wire::Meta& remote,
                   const wire::MetaMembers& lx, const wire::MetaMembers& rx, uint8_t tc,
                   uint8_t sl);
// Fusion: the comm's members (Engine::members_of) and its QPs laid over `npaths` paths of `qpp`
// QPs (before create_qps). Refuses more than kMaxConnMembers members or kMaxQps QPs.
Status set_members(Conn& c, const std::vector<Device*>& members, int npaths, int qpp);
// Fusion: the paths' weights from both sides' extensions (the sender's, then the receiver's: the
// same two lists on both ends give the same integers), the QPs per path, and the peer's members
// with its comm memory's key on each (what the CTS writes, the closes and the records use). Both
// sides call it once the extensions are exchanged, a one-path comm too (one path, the peer's
// member 0). Where no path has both ends above weight 0 (one side's only weighted member faces the
// other's fallback), every path carries by the sum of its ends' shares, and an INFO says so.
// peer_features: the peer's Meta::features (the path-message set both speak: the lower one).
void set_paths(Conn& c, const wire::MetaMembers& sender, const wire::MetaMembers& receiver,
               bool is_sender, uint8_t peer_features);
// This side's extension: member 0 from `local` (after the GID route's choice), the others from
// their devices, the weights (scaled to 16 bits) and the comm memory's rkeys.
void fill_local_members(const Conn& c, const wire::Meta& local,
                        const std::vector<uint32_t>& weights, wire::MetaMembers* x);
// Registers the comm memory also on every member adapter after member 0's (`mr0`), filling
// c.mem_lkey / c.mem_rkey for every member.
Status register_member_memory(Conn& c, NumaBuffer& mem, size_t bytes, const verbs::Mr& mr0);
// ECE (fabric.h): what both ends offer, from our QP 0's answer and the peer's metadata (run by
// accept_peer_meta); each QP sets it before its RTR (set_agreed_ece, comm/qp_bringup.h).
void agree_ece(Conn& c, const wire::Meta& remote);
int numa_of(const Device& d);
// Registers the first `bytes` of the comm's own memory (FIFO / records / staging) with the device.
Status register_comm_memory(Device& d, NumaBuffer& mem, size_t bytes, verbs::Mr* out);

// The eager path (docs/eager.md), once the peer's metadata is in: on when both ends offer it on a
// one-path comm; the adapter's pool is made at its first such comm.
Status setup_send_eager(SendComm& s, uint8_t local_features, uint8_t remote_features);
Status setup_recv_eager(RecvComm& r, uint8_t local_features, uint8_t remote_features);

}  // namespace sluice
