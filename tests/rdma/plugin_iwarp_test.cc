// iWARP in the bed (tests/rdma/iwarp.cmake; tests/rdma/iwarp_bed.sh loads Soft-iWARP beside the
// bed's Soft-RoCE devices first). Exit status = result (0 = pass).
//
//  1. The iWARP devices, found by their verbs transport type (never by name): at least one ACTIVE.
//  2. What the device does with RDMA WRITE with immediate data, seen on a real QP of it: Sluice's
//     refusal below rests on the provider rejecting that opcode; if one day it posts, this fails
//     and says to revisit the refusal.
//  3. Through the plugin tables: init WARNs that the iWARP device lacks RDMA WRITE with immediate
//     data and says what to use instead, offers every other port and not the iWARP one, and
//     finalizes with no verbs object of this process left.
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "plugin_bed.h"

namespace nettest {
namespace {

int fail(int rc, const std::string& why) {
  std::fprintf(stderr, "FAIL (%d): %s\n", rc, why.c_str());
  return rc;
}

// Names of the devices whose transport is iWARP and whose port 1 is ACTIVE.
std::vector<std::string> iwarp_devices() {
  std::vector<std::string> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list != nullptr && i < n; ++i) {
    if (list[i]->transport_type != IBV_TRANSPORT_IWARP) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_port_attr pa{};
    if (ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
      out.push_back(ibv_get_device_name(list[i]));
    ibv_close_device(ctx);
  }
  if (list != nullptr) ibv_free_device_list(list);
  return out;
}

// Posts one RDMA WRITE with immediate on an RC QP of `dev`; the ibv_post_send result ("" = posted).
std::string post_write_with_imm(const std::string& dev) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list != nullptr && i < n; ++i)
    if (dev == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
  if (list != nullptr) ibv_free_device_list(list);
  if (ctx == nullptr) return "cannot open " + dev;
  std::string out = "set-up failed";
  char buf[64] = {};
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 8, nullptr, nullptr, 0) : nullptr;
  ibv_mr* mr = cq ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  ibv_qp* qp = nullptr;
  if (mr != nullptr) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &ia);
  }
  if (qp != nullptr) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof buf, mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htonl(7);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf);
    wr.wr.rdma.rkey = mr->rkey;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp, &wr, &bad);
    out = rc == 0 ? ""
                  : "ibv_post_send returned " + std::to_string(rc) + " (" +
                        std::strerror(rc < 0 ? -rc : rc) + ")";
    ibv_destroy_qp(qp);
  }
  if (mr != nullptr) ibv_dereg_mr(mr);
  if (cq != nullptr) ibv_destroy_cq(cq);
  if (pd != nullptr) ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return out;
}

int run() {
  const std::vector<std::string> iw = iwarp_devices();
  if (iw.empty()) return fail(2, "no ACTIVE iWARP device (did the bed's siw set-up run?)");
  for (const std::string& d : iw) {
    const std::string r = post_write_with_imm(d);
    std::fprintf(stderr, "%s (iWARP): RDMA WRITE with immediate: %s\n", d.c_str(),
                 r.empty() ? "posted" : r.c_str());
    if (r.empty())
      return fail(3, d + " accepted RDMA WRITE with immediate data: Sluice's refusal of iWARP "
                         "devices (device_info.cc unusable_transport_reason) needs revisiting");
    if (!contains(r, "ibv_post_send")) return fail(3, d + ": " + r);
  }

  Net n(12);
  {
    sluice::rdmatest::ExpectWarns expect;
    const int warns = g_warns.load();
    if (n.init(0x1a0) != ncclSuccess) return fail(4, "init: " + last_warn());
    const std::string w = last_warn();
    if (g_warns.load() <= warns || !contains(w, iw.back() + " is an iWARP device") ||
        !contains(w, "no RDMA WRITE with immediate data") || !contains(w, "NCCL_IB_HCA") ||
        !contains(w, "NCCL_NET=Socket"))
      return fail(4, "no WARN naming " + iw.back() + " and the missing operation; last: " + w);
  }
  int nd = 0;
  if (n.devices(&nd) != ncclSuccess || nd < 1) return fail(5, "devices: none offered");
  for (int i = 0; i < nd; ++i) {
    Props p;
    if (n.properties(i, &p) != ncclSuccess) return fail(5, "getProperties " + std::to_string(i));
    for (const std::string& d : iw)
      if (p.name == d || p.name.rfind(d + ":", 0) == 0)
        return fail(5, "the iWARP device " + d + " is offered as device " + std::to_string(i));
    std::fprintf(stderr, "offered: [%d] %s\n", i, p.name.c_str());
  }
  if (n.finalize() != ncclSuccess) return fail(6, "finalize");
  for (const char* what : {"qp", "cq", "mr", "pd"}) {
    const long left = sluice::rdmatest::count_own(what);
    if (left != 0) return fail(6, std::to_string(left) + " " + what + "(s) left after finalize");
  }
  std::fprintf(stderr,
               "PASS: %zu iWARP device(s) refused with the reason, %d other port(s) offered\n",
               iw.size(), nd);
  return 0;
}

}  // namespace
}  // namespace nettest

int main() {
  return nettest::run();
}
