/* Loads libnccl-net-sluice.so exactly as NCCL does (dlopen RTLD_NOW | RTLD_LOCAL, dlsym of the
 * versioned table objects) from plain C, and checks every table: name "Sluice", every mandatory
 * entry point present, the documented NULL entries NULL. Then exercises the calls that need no
 * RDMA device: argument validation, finalize(NULL), and init's answer on this machine, whose first
 * INFO line must name the version and source revision ("Sluice 0.1.0 (git ...)"; printed).
 * usage: abi_dlopen_c_test [PLUGIN.so]   (default: the built plugin; tests/package passes the
 * library extracted from the .deb)
 * Compiled as C11: nccl_net_abi.h's _Static_asserts check the struct layouts at compile time. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/nccl_net_abi.h"
#include "sluice/sluice_ext.h"

#ifndef SLUICE_PLUGIN_PATH
#error "SLUICE_PLUGIN_PATH must name the built plugin"
#endif

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static int warns = 0;
static char first_info[512];
static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level == NCCL_LOG_WARN) ++warns;
  if (level == NCCL_LOG_INFO && first_info[0] == '\0') {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_info, sizeof first_info, fmt, ap);
    va_end(ap);
  }
}

/* The entry points every version has, in the same order and with the same names. */
#define CHECK_COMMON(t)                                           \
  do {                                                            \
    CHECK((t)->name != NULL && strcmp((t)->name, "Sluice") == 0); \
    CHECK((t)->init != NULL);                                     \
    CHECK((t)->devices != NULL);                                  \
    CHECK((t)->getProperties != NULL);                            \
    CHECK((t)->listen != NULL);                                   \
    CHECK((t)->connect != NULL);                                  \
    CHECK((t)->accept != NULL);                                   \
    CHECK((t)->regMr != NULL);                                    \
    CHECK((t)->regMrDmaBuf != NULL);                              \
    CHECK((t)->deregMr != NULL);                                  \
    CHECK((t)->isend != NULL);                                    \
    CHECK((t)->irecv != NULL);                                    \
    CHECK((t)->iflush != NULL);                                   \
    CHECK((t)->test != NULL);                                     \
    CHECK((t)->closeSend != NULL);                                \
    CHECK((t)->closeRecv != NULL);                                \
    CHECK((t)->closeListen != NULL);                              \
    CHECK((t)->getDeviceMr == NULL);   /* HOST plugin */          \
    CHECK((t)->irecvConsumed == NULL); /* HOST plugin */          \
  } while (0)

static const void* sym(void* lib, const char* name) {
  const void* p = dlsym(lib, name);
  if (p == NULL) {
    fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
    ++failures;
  }
  return p;
}

/* Calls that validate arguments before touching the engine: no device needed. */
static void check_validation_v12(const ncclNet_v12_t* t) {
  void* req = (void*)0x1; /* NCCL_NET_OPTIONAL_RECV_COMPLETION hint: must be overwritten */
  int done = 7;
  int ndev = -1;
  char buf[64];
  size_t size = sizeof buf;
  int tag = 0;
  void* data = buf;
  void* mh = buf;

  CHECK(t->finalize(NULL) == ncclSuccess); /* NCCL 2.28 after a failed init */
  CHECK(t->isend(NULL, buf, 1, 0, NULL, NULL, NULL) == ncclInvalidArgument);
  CHECK(t->isend(NULL, buf, 1, 0, NULL, NULL, &req) == ncclInvalidArgument);
  CHECK(req == NULL);
  req = (void*)0x1;
  CHECK(t->irecv(NULL, 1, &data, &size, &tag, &mh, NULL, &req) == ncclInvalidArgument);
  CHECK(req == NULL);
  req = (void*)0x1;
  CHECK(t->irecv(buf, 0, &data, &size, &tag, &mh, NULL, &req) == ncclInvalidArgument);
  CHECK(req == NULL);
  req = (void*)0x1;
  CHECK(t->irecv(buf, 9, &data, &size, &tag, &mh, NULL, &req) == ncclInvalidArgument);
  CHECK(req == NULL);
  CHECK(t->test(NULL, &done, NULL) == ncclInvalidArgument);
  CHECK(done == 0);
  CHECK(t->test(buf, NULL, NULL) == ncclInvalidArgument);
  CHECK(t->closeSend(NULL) == ncclSuccess);
  CHECK(t->closeRecv(NULL) == ncclSuccess);
  CHECK(t->closeListen(NULL) == ncclSuccess);
  CHECK(t->devices(NULL) == ncclInvalidArgument);
  CHECK(t->init(NULL, 1, NULL, logger, NULL) == ncclInvalidArgument);
  (void)ndev;
}

/* init on this machine: success only with a usable RDMA device; a failure leaves ctx NULL and the
 * NCCL 2.28 sequence init-fails-then-finalize(ctx) must be harmless. */
static void check_init_v12(const ncclNet_v12_t* t) {
  void* ctx = (void*)0x1;
  ncclNetCommConfig_v12_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  int ndev = -1;
  ncclResult_t r;
  CHECK(t->devices(&ndev) == ncclInvalidUsage); /* before init */
  if (t->makeVDevice != NULL) {                 /* main() checks it is set */
    ncclNetVDeviceProps_v12_t vp = {2, {0, 1}};
    int d = -1;
    CHECK(t->makeVDevice(&d, &vp) == ncclInvalidUsage); /* before init */
    CHECK(d == -1);
    CHECK(t->makeVDevice(NULL, &vp) == ncclInvalidArgument);
  }
  r = t->init(&ctx, 0x1234, &cfg, logger, NULL);
  if (r == ncclSuccess) {
    ncclNetProperties_v12_t props;
    int dev;
    printf("init succeeded: RDMA device(s) present\n");
    CHECK(ctx != NULL);
    CHECK(t->devices(&ndev) == ncclSuccess);
    CHECK(ndev > 0);
    for (dev = 0; dev < ndev; ++dev) {
      memset(&props, 0xff, sizeof props);
      CHECK(t->getProperties(dev, &props) == ncclSuccess);
      CHECK(props.name != NULL);
      CHECK((props.ptrSupport & NCCL_PTR_HOST) != 0);
      CHECK(props.netDeviceType == NCCL_NET_DEVICE_HOST);
      CHECK(props.netDeviceVersion == 0);
      CHECK(props.vProps.ndevs == 1 && props.vProps.devs[0] == dev);
      CHECK(props.maxP2pBytes > 0 && props.maxP2pBytes <= NCCL_MAX_NET_SIZE_BYTES);
      CHECK(props.maxCollBytes > 0 && props.maxCollBytes <= NCCL_MAX_NET_SIZE_BYTES);
      CHECK(props.maxRecvs >= 1 && props.maxRecvs <= 8);
      CHECK(props.maxMultiRequestSize == 1);
      /* NCCL_NET_ID_UNDEF unless SLUICE_NIC_RAILS names the device (this test sets none). */
      CHECK(props.railId == -1);
      CHECK(props.planeId == -1);
    }
    CHECK(t->getProperties(ndev, &props) == ncclInvalidArgument);
    CHECK(t->getProperties(-1, &props) == ncclInvalidArgument);
    if (t->makeVDevice != NULL) { /* its argument checks after init: refused, nothing made */
      ncclNetVDeviceProps_v12_t vp = {0, {0}};
      int d = -1, after = -1;
      CHECK(t->makeVDevice(&d, NULL) == ncclInvalidArgument);
      CHECK(t->makeVDevice(&d, &vp) == ncclInvalidArgument); /* no member */
      vp.ndevs = 2;
      vp.devs[0] = 0;
      vp.devs[1] = ndev; /* unknown index */
      CHECK(t->makeVDevice(&d, &vp) == ncclInvalidArgument);
      CHECK(t->devices(&after) == ncclSuccess);
      CHECK(after == ndev);
    }
    CHECK(t->finalize(ctx) == ncclSuccess);
    CHECK(t->finalize(ctx) == ncclInvalidArgument); /* no double release */
  } else {
    printf("init failed as expected without an RDMA device (result %d)\n", (int)r);
    CHECK(r == ncclSystemError || r == ncclInvalidUsage || r == ncclInternalError);
    CHECK(ctx == NULL);
    CHECK(t->finalize(ctx) == ncclSuccess);
    CHECK(t->devices(&ndev) == ncclInvalidUsage);
    CHECK(warns > 0); /* the reason was reported through the logger */
  }
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : SLUICE_PLUGIN_PATH;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const ncclNet_v8_t* v8;
  const ncclNet_v9_t* v9;
  const ncclNet_v10_t* v10;
  const ncclNet_v11_t* v11;
  const ncclNet_v12_t* v12;
  if (lib == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  v8 = (const ncclNet_v8_t*)sym(lib, "ncclNetPlugin_v8");
  v9 = (const ncclNet_v9_t*)sym(lib, "ncclNetPlugin_v9");
  v10 = (const ncclNet_v10_t*)sym(lib, "ncclNetPlugin_v10");
  v11 = (const ncclNet_v11_t*)sym(lib, "ncclNetPlugin_v11");
  v12 = (const ncclNet_v12_t*)sym(lib, "ncclNetPlugin_v12");
  if (failures != 0) return 1;

  /* Sluice's extension table: present, version 1, and commStats refuses what is not a comm. */
  {
    const sluiceExt_v1_t* ext = (const sluiceExt_v1_t*)sym(lib, SLUICE_EXT_SYMBOL);
    if (ext != NULL) {
      sluiceCommStats_v1_t st;
      CHECK(ext->version == 1);
      CHECK(ext->commStats != NULL);
      CHECK(ext->commStats(NULL, &st) != 0);
    }
  }

  /* Not exported: older tables and internal symbols. */
  CHECK(dlsym(lib, "ncclNetPlugin_v7") == NULL);
  CHECK(dlsym(lib, "ncclNetPlugin_v6") == NULL);
  CHECK(dlsym(lib, "ncclCollNetPlugin_v11") == NULL);

  CHECK_COMMON(v8);
  CHECK_COMMON(v9);
  CHECK(v9->makeVDevice != NULL); /* fusion (docs/fusion.md); v8 has no entry */
  CHECK_COMMON(v10);
  CHECK(v10->makeVDevice != NULL); /* fusion (docs/fusion.md); v8 has no entry */
  CHECK_COMMON(v11);
  CHECK(v11->makeVDevice != NULL); /* fusion (docs/fusion.md); v8 has no entry */
  CHECK(v11->finalize != NULL);
  CHECK(v11->setNetAttr != NULL);
  CHECK_COMMON(v12);
  CHECK(v12->makeVDevice != NULL); /* fusion (docs/fusion.md); v8 has no entry */
  CHECK(v12->finalize != NULL);
  CHECK(v12->setNetAttr != NULL);

  /* Layouts NCCL compiles against (also _Static_assert'ed in the header). */
  CHECK(sizeof(ncclNet_v8_t) == 152); /* v8 has no makeVDevice entry at all */
  CHECK(sizeof(ncclNet_v9_t) == 160);
  CHECK(sizeof(ncclNet_v10_t) == 160);
  CHECK(sizeof(ncclNet_v11_t) == 176);
  CHECK(sizeof(ncclNet_v12_t) == 176);
  CHECK(sizeof(ncclNetProperties_v8_t) == 64);
  CHECK(sizeof(ncclNetProperties_v9_t) == 104);
  CHECK(sizeof(ncclNetProperties_v11_t) == 112);
  CHECK(sizeof(ncclNetProperties_v12_t) == 128);
  CHECK(sizeof(ncclNetDeviceHandle_v7_t) == 32);
  CHECK(sizeof(ncclNetAttr_v11_t) == 44);
  CHECK(NCCL_NET_HANDLE_MAXSIZE == 128);
  CHECK(NCCL_NET_MAX_REQUESTS == 32);

  /* Before any init the plugin WARNs on stderr (its fallback sink): mark those lines as expected.
   */
  fprintf(stderr,
          "[expected] argument validation before init: the WARN lines up to \"[expected] end\" "
          "are provoked on purpose\n");
  check_validation_v12(v12);
  fprintf(stderr, "[expected] end\n");
  check_init_v12(v12);
  /* The first INFO line of init, device or not, says what is running. */
  printf("first INFO line: %s\n", first_info);
  CHECK(strncmp(first_info, "NET/Sluice : Sluice ", 20) == 0);
  CHECK(strstr(first_info, " (") != NULL);

  /* Deliberately no dlclose: NCCL keeps the library while any comm may use it. */
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all plugin tables OK (%s)\n", path);
  return 0;
}
