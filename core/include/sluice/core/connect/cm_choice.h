// Which connection manager a connection uses (SLUICE_CM), as pure logic: unit-tested without verbs.
//
// oob    = today's handshake: metadata over the out-of-band TCP socket, QPs to RTR/RTS by hand with
//          a GID chosen from the local table (net_addr.h).
// rdmacm = the same TCP metadata exchange (and the same socket kept for liveness), but every QP of
//          the connection is established through librdmacm: the listener's rdma_cm address (an IP
//          address of the listening device's own interface, carried in the handle beside the
//          out-of-band address) is resolved from our device's own address to the local device,
//          port and source GID that route there, and the CM exchange gives the path, PSNs and
//          peer QP (cm_rdmacm.h).
// auto   = rdmacm where it can work (the listener offers it and its address routes through our
//          device; iWARP always needs it), oob otherwise (InfiniBand without IPoIB, a listener
//          without rdma_cm, an address that routes through another device).
// The connector decides; the listener follows what the connector's metadata says.
#pragma once

#include <string>

namespace sluice {

enum class CmMode : int { kAuto = 0, kOob = 1, kRdmacm = 2 };  // Config::cm_mode values
const char* cm_mode_name(CmMode m);

// What is known when deciding.
struct CmFacts {
  CmMode knob = CmMode::kAuto;
  bool iwarp = false;        // our device's transport is iWARP
  bool peer_offers = false;  // the listen handle carries an rdma_cm port
  std::string device;        // our device, for the reason text
  std::string peer;          // the listener's (out-of-band) address, for the reason text
  std::string cm_peer;       // its rdma_cm listener's address ("" = the same as `peer`)
  std::string local_addr;    // our device's address the resolution starts from ("" = none bound)
  // The result of resolving the listener's address with rdma_resolve_addr, once tried.
  enum class Route { kNotTried, kThisDevice, kOtherDevice, kFailed } route = Route::kNotTried;
  std::string route_detail;  // kOtherDevice: the device it routes through; kFailed: the error
};

struct CmDecision {
  enum Verdict { kOob, kRdmacm, kResolveFirst, kError } verdict = kOob;
  std::string reason;  // why (INFO), or the error with its fix
};

// kResolveFirst asks the caller to resolve the listener's address and decide again with `route`
// set; the final verdict is kOob, kRdmacm or kError, never kResolveFirst once route is known.
CmDecision choose_cm(const CmFacts& f);

// What auto would pick for connections through a port, without a peer (sluice-info): rdmacm when
// the port has an IP address (toward peers whose address routes through it) or is iWARP, else oob.
CmDecision cm_for_port(CmMode knob, bool iwarp, bool has_ip);

// rdmacm connect side: within the bound on address resolution (cm_rdmacm.h, 5 s or the
// connect's deadline), resolution is asked of the kernel in attempts of at most this long,
// each with a fresh id: the kernel (ib_core's addr.c) looks at the neighbour entry when a request
// starts, then again only on a neighbour update or at the request's own timeout, and a neighbour
// answer that lands between its first look and its queueing of the request is not seen until that
// timeout. (Seen once in CI's bed: a connect right after a link came back up ran into its 4 s
// SLUICE_CONNECT_TIMEOUT_MS while "resolving the address", and this race is the one cause we found
// in the kernel's code.) A short attempt bounds that delay; each new attempt looks again, and
// starts ARP/ND again if it had given up.
inline constexpr int kCmResolveAttemptMs = 1000;
// The shortest attempt worth starting: with less left, the last attempt's error stands.
inline constexpr int kCmResolveMinAttemptMs = 100;
// Whether an address resolution that ended with the rdma_cm event status `event_status` (a
// negative errno) is tried again, `left_ms` before its bound: only a timeout (no neighbour answer
// yet), and only with time for one more attempt.
bool cm_resolve_again(int event_status, long long left_ms);

}  // namespace sluice
