// SLUICE_CM=rdmacm: QPs established through librdmacm (cm_rdmacm.h).
#include "connect/cm_rdmacm.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "connect/comm_setup.h"
#include "connect/oob_socket.h"
#include "connect/route_gid.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/net_addr.h"

namespace sluice {

namespace {

std::string status_text(rdma_cm_event_type ev, int status) {
  if (status < 0) return std::string(std::strerror(-status));
  if (ev == RDMA_CM_EVENT_REJECTED) {
    switch (status) {
      case 8:
        return "invalid service ID: nothing listens on that rdma_cm port";
      case 28:
        return "rejected by the peer's application";
      case 1:
        return "no QP";
      case 12:
        return "stale connection";
      default:
        return "IB CM reject reason " + std::to_string(status);
    }
  }
  return std::to_string(status);
}

const char* cause_of(rdma_cm_event_type ev, int status) {
  switch (ev) {
    case RDMA_CM_EVENT_ADDR_ERROR:
      if (status == -ETIMEDOUT)
        return "no neighbour (ARP/ND) answer from the listener's address: host down, or not on "
               "this link";
      return "the listener's address does not resolve to an RDMA device here (no route through "
             "an interface with an RDMA device); check `ip route get <peer>` and `rdma link`";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "no path to the peer (RoCE: no neighbour entry; IB: subnet manager unreachable)";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "the peer did not answer the connect request (host down, its device down, or "
             "packets dropped); check that both sides can `rping` each other";
    case RDMA_CM_EVENT_REJECTED:
      return status == 8 ? "the listener is gone (its listen comm closed or its process exited)"
             : status == 28
                 ? "the peer's Sluice did not recognise the request (see the peer's log: stale "
                   "handle, or a request for a connection it already dropped)"
                 : "the peer's connection manager refused the request";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "the connection failed while it was being established";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "the peer disconnected (its comm closed or its process exited)";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "the RDMA device was removed";
    default:
      return "unexpected rdma_cm event";
  }
}

int index_of(const CmLink& l, rdma_cm_id* id) {
  for (int q = 0; q < l.nqps; ++q)
    if (l.ids[q] == id) return q;
  return -1;
}

// Moves a comm QP to `state` with the attributes rdma_cm gives for its id, NCCL_IB_* overrides on
// top (as in oob mode).
Status modify_qp(const CmLink& l, rdma_cm_id* id, Conn& c, int q, ibv_qp_state state) {
  const Config& cfg = engine()->config();
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = state;
  if (rdma_init_qp_attr(id, &a, &mask) != 0) {
    return errno_status(Code::kSystemError,
                        std::string("rdma_init_qp_attr(") + (state == IBV_QPS_RTR ? "RTR" : "RTS") +
                            ") for " + c.describe_qp(q),
                        errno);
  }
  if (state == IBV_QPS_RTR) {
    a.min_rnr_timer = static_cast<uint8_t>(cfg.min_rnr_timer);
    a.ah_attr.grh.traffic_class = l.tc;
    a.ah_attr.sl = l.sl;
    // SLUICE_FLOW_LABEL: ours replaces the one rdma_cm's route hashed from its ports.
    const uint32_t cm_label = a.ah_attr.grh.flow_label;
    if (a.ah_attr.is_global && c.flow.count() > 0) {
      a.ah_attr.grh.flow_label = c.flow.label(static_cast<uint32_t>(q));
    }
    GidBytes g;
    std::memcpy(g.data(), a.ah_attr.grh.dgid.raw, 16);
    if (a.ah_attr.is_global && q == 0) c.remote_gid = gid_to_string(g);
    // Failback (datapath/failback_dp.cc) finds the route's source GID again by value after a
    // flap and brings the path's fresh QPs up over the kept socket, as in oob mode: our QPs are
    // our own (rdma_cm only established them, by QP number), so they can be replaced.
    const Device& md = *c.members[c.qp_member[q]].dev;
    ibv_gid sg{};
    if (a.ah_attr.is_global &&
        ibv_query_gid(md.adapter->ctx.get(), md.port, a.ah_attr.grh.sgid_index, &sg) == 0)
      std::memcpy(c.fo.member_gid[q / std::max(1, c.nqps / std::max(1, c.npaths))], sg.raw, 16);
    if (q == 0) {
      SLUICE_INFO(kSubNet,
                  "rdma_cm route for %s: source GID index %u, peer GID %s, path MTU %d, flow "
                  "label 0x%05x (the route's 0x%05x%s)",
                  c.describe_qp(q).c_str(), a.ah_attr.grh.sgid_index, c.remote_gid.c_str(),
                  128 << a.path_mtu, a.ah_attr.grh.flow_label, cm_label,
                  c.flow.count() > 0 ? ", replaced: SLUICE_FLOW_LABEL" : "");
    }
  } else {
    a.timeout = static_cast<uint8_t>(cfg.ib_timeout);
  }
  if (state == IBV_QPS_RTR) SLUICE_RETURN_IF_ERROR(set_agreed_ece(c, q));
  if (int rc = modify_qp_retrying(c.qp[q].get(), &a, mask, mqp_retry_from(cfg),
                                  state == IBV_QPS_RTR ? "rdma_cm RTR" : "rdma_cm RTS");
      rc != 0) {
    return errno_status(Code::kSystemError,
                        std::string("ibv_modify_qp to ") + (state == IBV_QPS_RTR ? "RTR" : "RTS") +
                            " with rdma_cm's attributes for " + c.describe_qp(q),
                        rc);
  }
  if (state == IBV_QPS_RTS) {
    // An iWARP QP is connected only through rdma_cm: its path fails over but is not brought back.
    const Device& md = *c.members[c.qp_member[q]].dev;
    c.fo.can_recover = md.adapter->ctx->device->transport_type != IBV_TRANSPORT_IWARP;
    c.fo.tc = l.tc;
    c.fo.sl = l.sl;
  }
  return Status::ok();
}

Status event_error(const CmEvent& e, const std::string& what) {
  return Status(Code::kRemoteError, what + ": " + cm_event_text(e.type, e.status));
}

rdma_conn_param conn_param(const void* pdata, uint8_t len, uint32_t qp_num) {
  const Config& cfg = engine()->config();
  rdma_conn_param p{};
  p.private_data = pdata;
  p.private_data_len = len;
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.flow_control = 1;
  p.retry_count = static_cast<uint8_t>(cfg.retry_cnt);
  p.rnr_retry_count = static_cast<uint8_t>(cfg.rnr_retry);
  p.qp_num = qp_num;
  return p;
}

}  // namespace

std::string cm_event_text(rdma_cm_event_type ev, int status) {
  return std::string(rdma_event_str(ev)) + " (status " + std::to_string(status) + ": " +
         status_text(ev, status) + "): " + cause_of(ev, status);
}

Result<std::unique_ptr<CmLink>> CmLink::create() {
  auto l = std::make_unique<CmLink>();
  auto m = CmMailbox::open();
  if (!m.is_ok()) return m.status();
  l->mailbox = std::move(m).value();
  return l;
}

void CmLinkDeleter::operator()(CmLink* l) const {
  delete l;
}

CmLink::~CmLink() {
  for (rdma_cm_id*& id : ids) {
    if (id != nullptr) rdma_destroy_id(id);
    id = nullptr;
  }
  mailbox.reset();  // after the ids
}

// ---- connect side ------------------------------------------------------------------------------

Result<bool> CmConnector::begin(const Device& d, bool peer_offers, const std::string& peer) {
  facts.knob = static_cast<CmMode>(engine()->config().cm_mode);
  facts.iwarp = d.adapter->ctx->device->transport_type == IBV_TRANSPORT_IWARP;
  facts.peer_offers = peer_offers;
  facts.device = d.name;
  facts.peer = peer;
  const CmDecision dec = choose_cm(facts);
  if (dec.verdict == CmDecision::kError) return Status(Code::kInvalidUsage, dec.reason);
  if (dec.verdict == CmDecision::kResolveFirst) return true;
  SLUICE_INFO(kSubNet, "connection manager for %s -> %s: oob (%s)", d.name.c_str(), peer.c_str(),
              dec.reason.c_str());
  return false;
}

Status CmConnector::decide(const Device& d, const sockaddr_storage& listener, int timeout_ms) {
  timeout_ms = std::min(timeout_ms, kCmResolveTimeoutMs);
  if (!link) {
    facts.cm_peer = sockaddr_text(listener);
    sockaddr_storage buf{};
    std::string text;
    const sockaddr_storage* from = cm_source_address(d, listener, &buf, &text);
    if (from != nullptr) {
      facts.local_addr = text;
    } else {
      SLUICE_INFO(kSubNet, "%s: resolving %s with rdma_cm from no bound source: %s", d.name.c_str(),
                  facts.cm_peer.c_str(), text.c_str());
    }
    auto l = CmLink::create();
    Status st = l.is_ok() ? Status::ok() : l.status();
    if (st.is_ok()) {
      link = std::move(l).value();
      st = cm_resolve_start(*link, from, listener, engine()->config().qps_per_connection,
                            timeout_ms);
    }
    if (!st.is_ok()) {
      facts.route = CmFacts::Route::kFailed;
      facts.route_detail = st.message();
    }
  }
  if (facts.route == CmFacts::Route::kNotTried) {
    SLUICE_RETURN_IF_ERROR(
        cm_resolve_poll(*link, d, timeout_ms, &facts.route, &facts.route_detail));
  }
  const CmDecision dec = choose_cm(facts);
  if (dec.verdict == CmDecision::kError) return Status(Code::kInvalidUsage, dec.reason);
  rdmacm = dec.verdict == CmDecision::kRdmacm;
  if (!rdmacm) link.reset();
  SLUICE_INFO(kSubNet, "connection manager for %s -> %s: %s (%s)", d.name.c_str(),
              facts.peer.c_str(), rdmacm ? "rdmacm" : "oob", dec.reason.c_str());
  return Status::ok();
}

const sockaddr_storage* cm_source_address(const Device& d, const sockaddr_storage& dst,
                                          sockaddr_storage* buf, std::string* text) {
  // Our own address of the listener's family, so that rdma_cm checks the route from this device.
  const std::vector<PortAddr> addrs = device_addresses(d);
  const CmAddrChoice src =
      choose_cm_address(addrs, engine()->oob_interface().addr, dst.ss_family, true, d.gid.index);
  if (src.index < 0) {
    *text = src.reason;
    return nullptr;
  }
  *buf = src.addr;
  *text = address_to_string(*buf);
  return buf;
}

Status cm_resolve_start(CmLink& l, const sockaddr_storage* src, const sockaddr_storage& dst,
                        int nqps, int timeout_ms) {
  l.nqps = 0;
  l.done = 0;
  return cm_resolve_more(l, 0, nqps, src, dst, nullptr, timeout_ms);
}

namespace {

using CmClock = std::chrono::steady_clock;

long long ms_left(CmClock::time_point until) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(until - CmClock::now()).count();
}

// One attempt at resolving id q's address (l.resolve[q]) with a fresh id, bounded by
// kCmResolveAttemptMs and what is left of l.resolve_until.
Status resolve_attempt(CmLink& l, int q) {
  CmLink::Resolve& r = l.resolve[q];
  ++r.attempts;
  const char* what = "";
  const int err = l.mailbox->resolve_attempt(&l.ids[q], r.has_src ? &r.src : nullptr, r.dst,
                                             l.resolve_until, &what);
  if (err == 0) return Status::ok();
  if (l.ids[q] == nullptr) return errno_status(Code::kSystemError, what, err);
  return errno_status(Code::kRemoteError,
                      std::string(what) + " of " + sockaddr_text(r.dst) +
                          (r.has_src ? " from " + address_to_string(r.src) : std::string()),
                      err);
}

}  // namespace

Status cm_resolve_more(CmLink& l, int first, int count, const sockaddr_storage* src,
                       const sockaddr_storage& dst, const Device* via, int timeout_ms) {
  if (first + count > wire::kMaxQps)
    return Status(Code::kInternalError, "rdma_cm: more ids than QPs");
  l.nqps = first + count;
  l.resolve_started = CmClock::now();
  l.resolve_until = l.resolve_started + std::chrono::milliseconds(timeout_ms);
  for (int q = first; q < first + count; ++q) {
    l.step_done[q] = false;
    l.via[q] = via;
    l.resolve[q] = CmLink::Resolve{};
    l.resolve[q].dst = dst;
    if (src != nullptr) l.resolve[q].src = *src;
    l.resolve[q].has_src = src != nullptr;
    SLUICE_RETURN_IF_ERROR(resolve_attempt(l, q));
  }
  l.progress = "resolving the address";
  return Status::ok();
}

Status cm_resolve_poll(CmLink& l, const Device& d, int timeout_ms, CmFacts::Route* route,
                       std::string* detail) {
  CmEvent e;
  for (;;) {
    auto got = l.mailbox->next(&e);
    if (!got.is_ok()) return got.status();
    if (!got.value()) return Status::again();
    const int q = index_of(l, e.id);
    if (q < 0 || l.step_done[q]) continue;
    switch (e.type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED: {
        const Device& want = l.via[q] != nullptr ? *l.via[q] : d;
        const char* name = e.id->verbs ? ibv_get_device_name(e.id->verbs->device) : "(none)";
        if (e.id->verbs == nullptr || want.adapter->name != name || e.id->port_num != want.port) {
          *route = CmFacts::Route::kOtherDevice;
          *detail = std::string(name) + ":" + std::to_string(e.id->port_num);
          return Status::ok();
        }
        if (rdma_resolve_route(e.id, timeout_ms) != 0)
          return errno_status(Code::kRemoteError, "rdma_resolve_route", errno);
        l.progress = "resolving the route";
        break;
      }
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        l.step_done[q] = true;
        if (++l.done == l.nqps) {
          *route = CmFacts::Route::kThisDevice;
          l.progress = "route resolved";
          return Status::ok();
        }
        break;
      case RDMA_CM_EVENT_ADDR_ERROR:
        if (cm_resolve_again(e.status, ms_left(l.resolve_until))) {
          SLUICE_INFO(kSubNet,
                      "rdma_cm: no neighbour answer for %s within %d ms (attempt %d): "
                      "resolving it again with a fresh id",
                      sockaddr_text(l.resolve[q].dst).c_str(), kCmResolveAttemptMs,
                      l.resolve[q].attempts);
          SLUICE_RETURN_IF_ERROR(resolve_attempt(l, q));
          break;
        }
        *route = CmFacts::Route::kFailed;
        *detail = cm_event_text(e.type, e.status) + " (" + std::to_string(l.resolve[q].attempts) +
                  (l.resolve[q].attempts == 1 ? " attempt" : " attempts") + " in " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     CmClock::now() - l.resolve_started)
                                     .count()) +
                  " ms)";
        return Status::ok();
      case RDMA_CM_EVENT_ROUTE_ERROR:
        *route = CmFacts::Route::kFailed;
        *detail = cm_event_text(e.type, e.status);
        return Status::ok();
      default:
        return event_error(e, "rdma_cm address resolution");
    }
  }
}

Status cm_connect_start(CmLink& l, Conn& c, const wire::Meta& local, const wire::Nonce& nonce) {
  l.done = 0;
  for (int q = 0; q < l.nqps; ++q) {
    l.step_done[q] = false;
    wire::CmToken t{};
    t.magic = wire::kCmTokenMagic;
    t.version = wire::kVersion;
    t.qp_index = static_cast<uint8_t>(q);
    t.nqps = static_cast<uint8_t>(l.nqps);
    t.nonce = nonce;
    t.fifo_addr = local.buf_addr;
    t.fifo_rkey = local.buf_rkey;
    rdma_conn_param p = conn_param(&t, sizeof t, c.qp[q].qpn);
    if (rdma_connect(l.ids[q], &p) != 0)
      return errno_status(Code::kRemoteError, "rdma_connect for " + c.describe_qp(q), errno);
  }
  l.progress = "waiting for the connect responses";
  return Status::ok();
}

Status cm_connect_poll(CmLink& l, Conn& c) {
  CmEvent e;
  for (;;) {
    auto got = l.mailbox->next(&e);
    if (!got.is_ok()) return got.status();
    if (!got.value()) return Status::again();
    const int q = index_of(l, e.id);
    if (q < 0) continue;
    if (e.type == RDMA_CM_EVENT_ESTABLISHED) continue;  // after rdma_establish, nothing to do
    if (e.type != RDMA_CM_EVENT_CONNECT_RESPONSE || l.step_done[q])
      return event_error(e, "rdma_cm connect of " + c.describe_qp(q));
    c.qp[q].remote_qpn = e.qp_num;
    SLUICE_RETURN_IF_ERROR(modify_qp(l, e.id, c, q, IBV_QPS_RTR));
    SLUICE_RETURN_IF_ERROR(modify_qp(l, e.id, c, q, IBV_QPS_RTS));
    if (rdma_establish(e.id) != 0)
      return errno_status(Code::kRemoteError, "rdma_establish for " + c.describe_qp(q), errno);
    l.step_done[q] = true;
    if (++l.done == l.nqps) {
      l.progress = "established";
      return Status::ok();
    }
  }
}

// ---- accept side -------------------------------------------------------------------------------

std::unique_ptr<CmListener> CmListener::create(const Device& d, const sockaddr_storage& addr,
                                               std::string* why) {
  auto l = std::make_unique<CmListener>();
  auto m = CmMailbox::open();
  if (!m.is_ok()) {
    *why = m.status().message();
    return nullptr;
  }
  l->mailbox = std::move(m).value();
  if (rdma_create_id(l->mailbox->channel(), &l->id, l->mailbox->context(), RDMA_PS_TCP) != 0) {
    l->id = nullptr;
    *why = errno_status(Code::kSystemError, "rdma_create_id", errno).message();
    return nullptr;
  }
  sockaddr_storage sa = addr;
  if (sa.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&sa)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = 0;
  if (rdma_bind_addr(l->id, reinterpret_cast<sockaddr*>(&sa)) != 0) {
    *why =
        errno_status(Code::kSystemError, "rdma_bind_addr to " + sockaddr_text(sa), errno).message();
    return nullptr;
  }
  const char* name = l->id->verbs ? ibv_get_device_name(l->id->verbs->device) : nullptr;
  if (name == nullptr || d.adapter->name != name || l->id->port_num != d.port) {
    *why = "the listener's address " + sockaddr_text(sa) + " is " +
           (name ? "on " + std::string(name) + ":" + std::to_string(l->id->port_num) + ", not " +
                       d.name
                 : "not on an RDMA device");
    return nullptr;
  }
  if (rdma_listen(l->id, 128) != 0) {
    *why = errno_status(Code::kSystemError, "rdma_listen", errno).message();
    return nullptr;
  }
  l->port = rdma_get_src_port(l->id);
  return l;
}

CmListener::~CmListener() {
  if (id != nullptr) rdma_destroy_id(id);
  mailbox.reset();  // after the id: connect requests still filed there are rejected
}

Status cm_listener_poll(CmListener& l, const wire::Nonce& nonce, const std::string& where,
                        const CmFind& find) {
  CmEvent e;
  for (;;) {
    auto got = l.mailbox->next(&e);
    if (!got.is_ok()) return got.status().with_context("rdma_cm listener on " + where);
    if (!got.value()) return Status::ok();
    if (e.type != RDMA_CM_EVENT_CONNECT_REQUEST) {
      SLUICE_INFO(kSubNet, "rdma_cm listener on %s: ignoring %s", where.c_str(),
                  cm_event_text(e.type, e.status).c_str());
      continue;
    }
    wire::CmToken t{};
    std::string why;
    Status valid = wire::validate_cm_token(e.pdata, e.pdata_len, nonce, &t);
    CmAcceptTarget target;
    if (valid.is_ok()) {
      target = find(t, e.qp_num, &why);
    } else {
      why = valid.message();
    }
    if (target.conn != nullptr && target.link->ids[t.qp_index] != nullptr) {
      why = "a second request for QP " + std::to_string(t.qp_index);
      target = {};
    }
    if (target.conn == nullptr) {
      SLUICE_INFO(kSubNet, "rdma_cm listener on %s: rejecting a connect request: %s", where.c_str(),
                  why.c_str());
      rdma_reject(e.id, nullptr, 0);
      rdma_destroy_id(e.id);
      continue;
    }
    CmLink& link = *target.link;
    Conn& c = *target.conn;
    const int q = t.qp_index;
    link.mailbox->adopt(e.id);  // its later events go to the link
    link.ids[q] = e.id;
    c.qp[q].remote_qpn = e.qp_num;
    Status st = modify_qp(link, e.id, c, q, IBV_QPS_RTR);
    rdma_conn_param p = conn_param(nullptr, 0, c.qp[q].qpn);
    if (st.is_ok() && rdma_accept(e.id, &p) != 0)
      st = errno_status(Code::kRemoteError, "rdma_accept for " + c.describe_qp(q), errno);
    if (!st.is_ok()) {
      link.failure = st;
      rdma_reject(e.id, nullptr, 0);
    }
  }
}

Status cm_accept_prepare(std::unique_ptr<CmLink>* out, int nqps, uint8_t tc, uint8_t sl) {
  auto l = CmLink::create();
  if (!l.is_ok()) return l.status();
  *out = std::move(l).value();
  (*out)->nqps = nqps;
  (*out)->tc = tc;
  (*out)->sl = sl;
  (*out)->progress = "waiting for the connect requests";
  return Status::ok();
}

Status cm_accept_poll(CmLink& l, Conn& c) {
  if (!l.failure.is_ok()) return l.failure;
  CmEvent e;
  for (;;) {
    auto got = l.mailbox->next(&e);
    if (!got.is_ok()) return got.status();
    if (!got.value()) return l.done == l.nqps ? Status::ok() : Status::again();
    const int q = index_of(l, e.id);
    if (q < 0) continue;
    if (e.type != RDMA_CM_EVENT_ESTABLISHED || l.step_done[q])
      return event_error(e, "rdma_cm accept of " + c.describe_qp(q));
    SLUICE_RETURN_IF_ERROR(modify_qp(l, e.id, c, q, IBV_QPS_RTS));
    l.step_done[q] = true;
    ++l.done;
    l.progress = std::to_string(l.done) + " of " + std::to_string(l.nqps) + " QPs established";
  }
}

}  // namespace sluice
