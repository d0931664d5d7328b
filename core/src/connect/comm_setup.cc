// QP and comm-memory setup shared by connect and accept (comm_setup.h).
#include "connect/comm_setup.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "comm/eager_pool.h"
#include "sluice/core/base/log.h"

namespace sluice {

void fill_local_meta(const Device& d, uint8_t role, const wire::Nonce& nonce, wire::Meta* m) {
  std::memset(m, 0, sizeof *m);
  m->magic = wire::kMetaMagic;
  m->version = wire::kVersion;
  m->role = role;
  m->link_layer = d.attr.link_layer;
  m->port = d.port;
  m->mtu = static_cast<uint8_t>(d.attr.active_mtu);
  m->gid_index = static_cast<uint8_t>(d.gid.index);
  m->lid = d.attr.lid;
  m->fifo_slots = wire::kFifoSlots;
  m->nonce = nonce;
  std::memcpy(m->gid, d.gid.gid.data(), 16);
  std::snprintf(m->dev_name, sizeof m->dev_name, "%s", d.name.c_str());
  if (local_path_msg_set() >= 2) m->features |= wire::kMetaFeaturePathSet2;
  const Config& cfg = engine()->config();
  if (cfg.eager_max > 0 && cfg.eager_rings > 0) {
    m->features |= wire::kMetaFeatureEager;
    if (cfg.eager_fused) m->features |= wire::kMetaFeatureEagerFused;
    m->features |= wire::kMetaFeatureEagerBatch;  // every receiver reads batches
  }
}

namespace {

// Whether a comm negotiated the eager path (*negotiated: both ends offer it; a fused comm its fused
// form too, SLUICE_EAGER_FUSED), and the adapter's pool (made here, on the setup path, at the first
// such comm; null when it could not be made: a WARN once per adapter).
Result<EagerPool*> eager_pool_for(Conn& c, uint8_t local_features, uint8_t remote_features,
                                  bool* negotiated) {
  *negotiated = false;
  const bool both = (local_features & remote_features & wire::kMetaFeatureEager) != 0;
  SLUICE_TRACE(kSubNet, "%s: eager path offered here %d, by the peer %d", c.describe_qp(0).c_str(),
               (local_features & wire::kMetaFeatureEager) != 0,
               (remote_features & wire::kMetaFeatureEager) != 0);
  if (!both) {
    if ((local_features & wire::kMetaFeatureEager) != 0 &&
        (remote_features & wire::kMetaFeatureEagerV1) != 0) {
      SLUICE_INFO(kSubNet,
                  "%s: the peer's eager path is an older format (a Sluice before held "
                  "clear-to-send): clear-to-send only on this comm; run the same Sluice on both",
                  c.describe_qp(0).c_str());
    }
    return static_cast<EagerPool*>(nullptr);
  }
  if (c.npaths > 1 && (local_features & remote_features & wire::kMetaFeatureEagerFused) == 0) {
    SLUICE_INFO(kSubNet, "%s: eager path off on this fused comm (%d paths): %s; clear-to-send only",
                c.describe_qp(0).c_str(), c.npaths,
                (local_features & wire::kMetaFeatureEagerFused) == 0
                    ? "SLUICE_EAGER_FUSED=0 here"
                    : "the peer does not offer it (SLUICE_EAGER_FUSED=0 there, or an older "
                      "Sluice)");
    return static_cast<EagerPool*>(nullptr);
  }
  *negotiated = true;
  return eager_pool_of(*c.dev->adapter, numa_of(*c.dev));
}

// The pool's keys on each of the comm's members (eager_pool_keys). A registration refused turns
// the comm's eager path off, as a pool that cannot be made does: false. The refusal is said at
// WARN by the comm that met it, and at INFO by every later comm given the same remembered one.
bool member_keys(Conn& c, uint32_t* lkeys, uint32_t* rkeys) {
  for (int m = 0; m < c.nmembers; ++m) {
    bool remembered = false;
    if (Status st = eager_pool_keys(*c.dev->adapter, *c.members[m].dev->adapter, &lkeys[m],
                                    &rkeys[m], &remembered);
        !st.is_ok()) {
      if (remembered) {
        SLUICE_INFO(kSubNet,
                    "%s: eager path off for this comm: %s (refused before on this pair of "
                    "adapters, not tried again)",
                    c.describe_qp(0).c_str(), st.message().c_str());
      } else {
        SLUICE_WARN("%s: eager path off for this comm: %s", c.describe_qp(0).c_str(),
                    st.message().c_str());
      }
      return false;
    }
  }
  return true;
}

}  // namespace

Status setup_send_eager(SendComm& s, uint8_t local_features, uint8_t remote_features) {
  bool negotiated = false;
  auto pool = eager_pool_for(s.c, local_features, remote_features, &negotiated);
  if (!pool.is_ok()) return pool.status();
  EagerPool* p = pool.value();
  if (p != nullptr) {
    s.eg.ref.adapter = s.c.dev->adapter;  // eager_pool_of's reference
    uint32_t rkeys[kMaxConnMembers] = {};
    if (!member_keys(s.c, s.eg.lkeys, rkeys)) {
      s.eg.ref.reset();
      p = nullptr;
    }
  }
  // Negotiated, the comm reads the receiver's eager marks in its entries, pool or not. Without a
  // pool here (it could not be made, or not keyed on a member) it sends nothing eagerly (no book,
  // no staging), and if the receiver lends it a ring it asks once for everything (decide_book).
  s.eg.on = negotiated;
  // Messages per WRITE: more than one only to a receiver that reads batches.
  s.eg.batch_max = (remote_features & wire::kMetaFeatureEagerBatch) != 0
                       ? static_cast<uint32_t>(engine()->config().eager_batch)
                       : 1;
  if (s.eg.on) {
    s.c.stats.set_eager(p != nullptr ? EagerState::kNegotiated : EagerState::kWithout);
    s.eg.book_lease.pool = p;  // its book: borrowed at its first use (eager.cc)
    s.eg.staging.pool = p;     // borrowed at the first eager send
  }
  // The receiver's head cell follows its records and grant source (listener.cc).
  s.eg.remote_head =
      s.remote_records + sizeof(wire::DoneRecord) * wire::kFifoSlots + sizeof(wire::EagerGrant);
  return Status::ok();
}

Status setup_recv_eager(RecvComm& r, uint8_t local_features, uint8_t remote_features) {
  bool negotiated = false;
  auto pool = eager_pool_for(r.c, local_features, remote_features, &negotiated);
  if (!pool.is_ok()) return pool.status();
  // Without a pool the receiver never lends a ring (nor numbers, nor grants): its sender reads its
  // first entries without a grant and goes without a book.
  r.eg.on = pool.value() != nullptr;
  if (!r.eg.on) return Status::ok();
  r.eg.ref.adapter = r.c.dev->adapter;  // eager_pool_of's reference
  uint32_t lkeys[kMaxConnMembers] = {};
  if (!member_keys(r.c, lkeys, r.eg.rkeys)) {
    r.eg.ref.reset();
    r.eg.on = false;
    return Status::ok();
  }
  r.c.stats.set_eager(EagerState::kNegotiated);
  r.eg.ring.pool = pool.value();  // ring and book: borrowed at the first receive (eager.cc)
  r.eg.hold = engine()->config().eager_hold;
  // The sender's grant block follows its FIFO (a fused comm's entries are cell pairs) and records
  // (connect.cc).
  r.eg.remote_block = r.remote_fifo +
                      sizeof(wire::CtsEntry) * wire::kFifoSlots * wire::kEntriesPerSlot *
                          static_cast<size_t>(wire::cts_cells(r.c.npaths)) +
                      sizeof(wire::DoneRecord) * wire::kFifoSlots;
  return Status::ok();
}

int local_path_msg_set() {
  const Config& cfg = engine()->config();
  if (!cfg.failover) return 1;  // offers nothing: no path message is ever sent
  return cfg.test_path_msg_set > 0 ? cfg.test_path_msg_set : wire::kPathMsgSetNewest;
}

Status create_qps(Conn& c, int nqps, const QpCaps& caps, int cqe, wire::Meta* m) {
  const Config& cfg = engine()->config();
  if (c.nmembers == 0) {  // a one-member comm: its device
    c.nmembers = 1;
    c.members[0].dev = c.dev;
  }
  for (int mi = 0; mi < c.nmembers; ++mi) {  // one CQ per member, on its own adapter
    const Device& md = *c.members[mi].dev;
    c.members[mi].cq.reset(ibv_create_cq(md.adapter->ctx.get(), cqe, nullptr, nullptr, 0));
    if (!c.members[mi].cq) {
      return errno_status(Code::kSystemError,
                          "ibv_create_cq(" + std::to_string(cqe) + " entries) on " + md.name,
                          errno);
    }
  }
  c.qp.make(nqps);
  c.nqps = nqps;
  m->nqps = static_cast<uint8_t>(nqps);
  c.max_inline = caps.max_inline_data;
  for (int q = 0; q < nqps; ++q) {
    QpCaps k = caps;
    SLUICE_RETURN_IF_ERROR(qp_bring_init(c, q, &k, &c.qp[q]));
    c.max_inline = std::min(c.max_inline, k.max_inline_data);  // what every QP takes
    m->qps[q].qpn = c.qp[q].qpn;
    m->qps[q].psn = random_psn();
  }
  // ECE: the QPs of one comm share device and attributes, so QP 0's answer stands for all.
  Device& d = *c.dev;
  const EceQuery eq = query_ece(c.qp[0].get(), cfg.ece_enable);
  c.ece_local = eq.ece;
  if (eq.ece.supported &&
      !wire::put_meta_ece(m, {eq.ece.vendor_id, eq.ece.options, eq.ece.comp_mask})) {
    c.ece_local = Ece{};  // a comp_mask the metadata cannot carry: connect without ECE
  }
  if (!d.ece_said.exchange(true)) {
    if (c.ece_local.supported) {
      SLUICE_INFO(kSubInit | kSubNet, "%s: ECE %s offered on every connection", d.name.c_str(),
                  ece_text(c.ece_local).c_str());
    } else {
      SLUICE_INFO(kSubInit | kSubNet, "%s: ECE not used (%s): connections are made without it",
                  d.name.c_str(), eq.ece.supported ? "comp_mask beyond 24 bits" : eq.text.c_str());
    }
  }
  return Status::ok();
}

void agree_ece(Conn& c, const wire::Meta& remote) {
  Ece theirs;
  wire::MetaEce e;
  if (wire::meta_ece(remote, &e)) theirs = Ece{true, e.vendor_id, e.options, e.comp_mask};
  c.ece = ece_intersection(c.ece_local, theirs);
  SLUICE_TRACE(kSubNet, "%s: ECE local %s, peer %s, set %s", c.describe_qp(0).c_str(),
               ece_text(c.ece_local).c_str(), ece_text(theirs).c_str(), ece_text(c.ece).c_str());
}

void choose_flow_labels(Conn& c, const wire::Meta& local, const wire::Meta& remote) {
  const Device& d = *c.dev;
  c.flow = flow::LabelSet();
  auto pol = flow::parse_policy(engine()->config().flow_label);  // validated at load
  const flow::Policy p = pol.is_ok() ? pol.value() : flow::Policy{};
  if (!d.roce) {
    static std::atomic<bool> said{false};
    if (p.on && !said.exchange(true)) {
      SLUICE_INFO(kSubInit | kSubNet,
                  "%s: SLUICE_FLOW_LABEL=%s does not apply on InfiniBand (no UDP source port; "
                  "the subnet manager's routes and adaptive routing spread the QPs)",
                  d.name.c_str(), flow::policy_text(p).c_str());
    }
    return;
  }
  const int n = std::min<int>({c.nqps, local.nqps, remote.nqps});
  if (n <= 0) return;
  if (p.on) {
    c.flow = flow::LabelSet(p.seed, flow::conn_key(local.qps[0].qpn, remote.qps[0].qpn),
                            static_cast<uint32_t>(n));
  }
  std::string text;
  for (int q = 0; q < n; ++q) {
    const uint32_t l = c.flow.label(static_cast<uint32_t>(q));
    char buf[96];
    if (p.on) {
      std::snprintf(buf, sizeof buf, "%sqpn %u->%u label 0x%05x sport %u", q ? ", " : "",
                    local.qps[q].qpn, remote.qps[q].qpn, l, flow::label_to_udp_sport(l));
    } else {  // what the kernel's QPN hash gives (oob; rdma_cm's route brings its own label)
      std::snprintf(buf, sizeof buf, "%sqpn %u->%u sport %u", q ? ", " : "", local.qps[q].qpn,
                    remote.qps[q].qpn,
                    flow::kernel_udp_sport(0, local.qps[q].qpn, remote.qps[q].qpn));
    }
    text += buf;
  }
  SLUICE_INFO(kSubNet, "flow labels for %s -> %s at %s (SLUICE_FLOW_LABEL=%s%s): %s",
              c.local_desc.c_str(), c.remote_dev.c_str(), c.peer.c_str(),
              flow::policy_text(p).c_str(),
              p.on ? "" : ", the QPN hash where no connection manager sets one", text.c_str());
}

Status accept_peer_meta(Conn& c, const wire::Meta& local, const wire::Meta& remote) {
  SLUICE_RETURN_IF_ERROR(wire::check_peer_meta(local, remote, c.dev->name));
  GidBytes rg;
  std::memcpy(rg.data(), remote.gid, 16);
  c.remote_gid = gid_to_string(rg);
  c.remote_dev = remote.dev_name;
  agree_ece(c, remote);
  choose_flow_labels(c, local, remote);
  return Status::ok();
}

Status connect_qps(Conn& c, const wire::Meta& local, const wire::Meta& remote,
                   const wire::MetaMembers& lx, const wire::MetaMembers& rx, uint8_t tc,
                   uint8_t sl) {
  SLUICE_RETURN_IF_ERROR(accept_peer_meta(c, local, remote));
  const int qpp = c.nqps / c.npaths;
  for (int q = 0; q < c.nqps; ++q) {
    // The path's two ends (one member each side: member 0 and Meta's own fields when unfused).
    const wire::MemberInfo& me = lx.members[c.qp_member[q]];
    const wire::MemberInfo& peer = rx.members[wire::qp_member(q, qpp, rx.nmembers)];
    QpEnds e;
    e.mtu = me.mtu;
    e.sgid_index = me.gid_index;
    e.peer = &peer;
    e.dest_qpn = remote.qps[q].qpn;
    e.dest_psn = remote.qps[q].psn;
    e.sq_psn = local.qps[q].psn;
    e.tc = tc;
    e.sl = sl;
    SLUICE_RETURN_IF_ERROR(qp_bring_connect(c, q, e));
    std::memcpy(c.fo.member_gid[q / qpp], me.gid, 16);  // failback finds it again by value
  }
  // Failback brings a path's QPs up again the way this bring-up did (datapath/failback_dp.cc).
  c.fo.can_recover = true;
  c.fo.tc = tc;
  c.fo.sl = sl;
  return Status::ok();
}

Status set_members(Conn& c, const std::vector<Device*>& members, int npaths, int qpp) {
  const int n = static_cast<int>(members.size());
  if (n < 1 || n > kMaxConnMembers || npaths < n || npaths > kMaxConnMembers) {
    return Status(Code::kInvalidUsage,
                  "a fused device of " + std::to_string(n) + " members (" + std::to_string(npaths) +
                      " paths): a comm runs over at most " + std::to_string(kMaxConnMembers));
  }
  if (qpp < 1 || npaths * qpp > wire::kMaxQps) {
    return Status(Code::kInvalidUsage,
                  "NCCL_IB_QPS_PER_CONNECTION=" + std::to_string(qpp) + " on each of " +
                      std::to_string(npaths) + " paths of a fused connection makes " +
                      std::to_string(npaths * qpp) + " QPs; at most " +
                      std::to_string(wire::kMaxQps) + " (lower NCCL_IB_QPS_PER_CONNECTION)");
  }
  c.nmembers = n;
  for (int m = 0; m < n; ++m) c.members[m].dev = members[m];
  c.dev = members[0];
  c.npaths = npaths;
  for (int q = 0; q < npaths * qpp; ++q)
    c.qp_member[q] = static_cast<uint8_t>(wire::qp_member(q, qpp, n));
  return Status::ok();
}

void set_paths(Conn& c, const wire::MetaMembers& sender, const wire::MetaMembers& receiver,
               bool is_sender, uint8_t peer_features) {
  const wire::MetaMembers& remote = is_sender ? receiver : sender;
  c.qpp = c.nqps / std::max(c.npaths, 1);
  c.remote_nmembers = remote.nmembers;
  for (int m = 0; m < kMaxConnMembers; ++m) {
    c.remote_mem_rkey[m] = m < remote.nmembers ? remote.members[m].buf_rkey : 0;
    c.remote_member_gid[m].clear();
    if (m >= remote.nmembers) continue;
    GidBytes g;
    std::memcpy(g.data(), remote.members[m].gid, 16);
    c.remote_member_gid[m] = gid_to_string(g);
  }
  const Config& cfg = engine()->config();
  c.stripe_min = static_cast<size_t>(cfg.stripe_min);
  if (c.npaths <= 1) {
    c.paths = stripe::Paths{};
    return;
  }
  // Failover (health/path_failover.h): on when both sides run it.
  failover::Timing t;
  t.fence_bound_ms = cfg.failover_fence_ms;
  t.retry_base_ms = cfg.failback_retry_ms;
  t.retry_cap_ms = std::max(cfg.failback_retry_cap_ms, cfg.failback_retry_ms);
  t.ramp_step_ms = cfg.failback_ramp_ms;
  const bool both = (sender.flags & receiver.flags & wire::kMembersFlagFailover) != 0;
  // The path-message set both speak (wire.h kMetaFeaturePathSet2): the lower of the two.
  const int peer_set = (peer_features & wire::kMetaFeaturePathSet2) != 0 ? 2 : 1;
  const int path_set = std::min(local_path_msg_set(), peer_set);
  t.checked_word = path_set >= 2;
  fo_init(c.fo, both, is_sender, c.npaths, t);
  c.fo.path_set = path_set;
  c.fo.hold_rq = c.fo.on && cfg.test_hold_rq;
  uint16_t ws[wire::kMaxMetaMembers] = {}, wr[wire::kMaxMetaMembers] = {};
  for (int m = 0; m < sender.nmembers; ++m) ws[m] = sender.members[m].weight;
  for (int m = 0; m < receiver.nmembers; ++m) wr[m] = receiver.members[m].weight;
  c.paths = stripe::path_weights(ws, sender.nmembers, wr, receiver.nmembers);
  if (c.paths.active_mask() == 0) {
    // Both sides derive this alike from the same lists: every member weighted 1 on both ends.
    uint16_t one[wire::kMaxMetaMembers] = {1, 1, 1, 1};
    c.paths = stripe::path_weights(one, sender.nmembers, one, receiver.nmembers);
    SLUICE_INFO(kSubNet,
                "%s <-> %s: no path has a weighted member on both ends (one side's fallback "
                "member faces the other's only weighted one); every path carries an equal share",
                c.local_desc.c_str(), c.peer.c_str());
  }
  std::string w;
  for (int p = 0; p < c.paths.npaths; ++p)
    w += (p ? ", " : "") + std::to_string(p) + "=" + std::to_string(c.paths.weight[p]);
  (void)fo_restripe(c.fo, c.paths);
  const char* set_text = path_set >= 2 ? " (path-message set 2)"
                         : peer_set < 2
                             ? " (path-message set 1: the peer is an older Sluice; a recovered "
                               "path's check proves one direction only, and the path takes its "
                               "whole share at once)"
                             : " (path-message set 1: SLUICE_TEST_PATH_MSG_SET)";
  SLUICE_INFO(kSubNet, "%s <-> %s (%s): %d paths of %d QPs, path weights %s (of %u); failover %s%s",
              c.local_desc.c_str(), c.remote_dev.c_str(), c.peer.c_str(), c.paths.npaths, c.qpp,
              w.c_str(), stripe::kShareScale,
              c.fo.on         ? "on"
              : !cfg.failover ? "off (SLUICE_FAILOVER=0)"
                              : "off (the peer runs without it)",
              c.fo.on ? set_text : "");
}

void fill_local_members(const Conn& c, const wire::Meta& local,
                        const std::vector<uint32_t>& weights, wire::MetaMembers* x) {
  const int qpp = c.nqps / c.npaths;
  wire::init_members(x, c.nmembers, c.npaths, qpp);
  if (engine()->config().failover) x->flags |= wire::kMembersFlagFailover;
  x->members[0] = wire::members_of_meta(local).members[0];
  uint32_t top = 0;
  for (uint32_t w : weights) top = std::max(top, w);
  const uint32_t div = top / 0xffffu + 1;  // 16 bits on the wire; a non-zero weight stays so
  for (int m = 0; m < c.nmembers; ++m) {
    const Device& d = *c.members[m].dev;
    wire::MemberInfo& e = x->members[m];
    if (m > 0) {
      std::memcpy(e.gid, d.gid.gid.data(), 16);
      e.lid = d.attr.lid;
      e.port = d.port;
      e.mtu = static_cast<uint8_t>(d.attr.active_mtu);
      e.gid_index = static_cast<uint8_t>(d.gid.index);
      e.link_layer = d.attr.link_layer;
      e.buf_rkey = c.mem_rkey[m];
    }
    const uint32_t w = m < static_cast<int>(weights.size()) ? weights[m] : 1;
    e.weight = static_cast<uint16_t>(w == 0 ? 0 : std::max<uint32_t>(1, w / div));
  }
  bool any = false;
  for (int m = 0; m < c.nmembers; ++m) any = any || x->members[m].weight > 0;
  if (!any)
    for (int m = 0; m < c.nmembers; ++m) x->members[m].weight = 1;  // all fallback: all equal
}

Status register_member_memory(Conn& c, NumaBuffer& mem, size_t bytes, const verbs::Mr& mr0) {
  c.mem_lkey[0] = mr0->lkey;
  c.mem_rkey[0] = mr0->rkey;
  for (int m = 1; m < c.nmembers; ++m) {
    int same = -1;  // an earlier member on the same adapter shares its registration (one PD)
    for (int k = 0; k < m && same < 0; ++k)
      if (c.members[k].dev->adapter == c.members[m].dev->adapter) same = k;
    if (same >= 0) {
      c.mem_lkey[m] = c.mem_lkey[same];
      c.mem_rkey[m] = c.mem_rkey[same];
      continue;
    }
    SLUICE_RETURN_IF_ERROR(register_comm_memory(*c.members[m].dev, mem, bytes, &c.mem_mr_more[m]));
    c.mem_lkey[m] = c.mem_mr_more[m]->lkey;
    c.mem_rkey[m] = c.mem_mr_more[m]->rkey;
  }
  return Status::ok();
}

int numa_of(const Device& d) {
  return d.adapter->locality.numa_node;
}

Status register_comm_memory(Device& d, NumaBuffer& mem, size_t bytes, verbs::Mr* out) {
  out->reset(ibv_reg_mr(d.adapter->pd.get(), mem.data(), bytes,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!*out)
    return errno_status(Code::kSystemError, "ibv_reg_mr of comm memory on " + d.name, errno);
  return Status::ok();
}

}  // namespace sluice
