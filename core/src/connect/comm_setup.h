// QP and comm-memory setup shared by both sides of connection setup (connect.cc, listener.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/comm.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/base/wire.h"

namespace sluice {

// The last byte of the handshake: the connector's QPs are at RTS.
inline constexpr uint8_t kReadyByte = 0x5a;

void fill_local_meta(const Device& d, uint8_t role, uint64_t nonce, wire::Meta* m);
// Creates the CQ and `nqps` RC QPs at INIT and records their QPN/PSN in `m`.
Status create_qps(Conn& c, int nqps, const QpCaps& caps, int cqe, wire::Meta* m);
// Checks the peer's metadata against ours (wire::check_peer_meta) and records its device and GID.
// SLUICE_FLOW_LABEL: gives c.flow a spread set over the connection's QPs (RoCE; on InfiniBand one
// INFO per process says it does not apply) and logs the labels and ports, one INFO line.
void choose_flow_labels(Conn& c, const wire::Meta& local, const wire::Meta& remote);
Status accept_peer_meta(Conn& c, const wire::Meta& local, const wire::Meta& remote);
// RTR and RTS for every QP against the peer's metadata (accept_peer_meta first).
Status connect_qps(Conn& c, const wire::Meta& local, const wire::Meta& remote, uint8_t tc,
                   uint8_t sl);
// ECE (fabric.h): what both ends offer, from our QP 0's answer and the peer's metadata (run by
// accept_peer_meta), and ibv_set_ece of it on QP q before its RTR (a provider answering
// EOPNOTSUPP leaves the connection without ECE, as NCCL's).
void agree_ece(Conn& c, const wire::Meta& remote);
Status set_agreed_ece(Conn& c, int q);
int numa_of(const Device& d);
// Registers the first `bytes` of the comm's own memory (FIFO / records / staging) with the device.
Status register_comm_memory(Device& d, NumaBuffer& mem, size_t bytes, verbs::Mr* out);

}  // namespace sluice
