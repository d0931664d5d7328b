#!/usr/bin/env python3
"""Stand-in for tests/gpu/nccl_torch.py where PyTorch (or a GPU) is missing: the rehearsal of
run.sh's NCCL step here. It is NOT NCCL and moves no data. It does what NCCL's ncclNetInit does
with NCCL_NET_PLUGIN/NCCL_NET=Sluice up to the point where NCCL would refuse or go on: dlopen the
plugin in this (Python) process, find ncclNetPlugin_v12, call init() and devices(). It writes the
lines NCCL would write into NCCL_DEBUG_FILE (%h and %p expanded as NCCL does), so run.sh's
verdict is exercised on the file NCCL really writes, and raises the error torch would raise.
Exit 3 always (no all-reduce ran), with "TORCH_NCCL: ERROR [stand-in] ..." as its last line."""
import ctypes
import os
import socket
import sys


def main():
    rank = int(os.environ.get("RANK", "0"))
    host = socket.gethostname().split(".")[0]
    path = os.environ.get("NCCL_DEBUG_FILE", "/dev/null").replace("%h", host).replace(
        "%p", str(os.getpid()))
    plugin = os.environ["NCCL_NET_PLUGIN"]
    pre = f"{host}:{os.getpid()}:{os.getpid()} [0]"
    lines = [f"{pre} NCCL INFO [stand-in, not NCCL] NCCL_NET_PLUGIN set by environment to {plugin}"]
    err = ""
    try:
        lib = ctypes.CDLL(plugin, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        table = ctypes.c_void_p.in_dll(lib, "ncclNetPlugin_v12")
        lines.append(f"{pre} NCCL INFO NET/Plugin: Loaded net plugin Sluice (v12)")
        fns = ctypes.cast(ctypes.addressof(table), ctypes.POINTER(ctypes.c_void_p))
        init_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                                  ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_void_p)
        dev_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))
        # Sluice calls the logger as logger(level, subsys, file, line, "%s", msg).
        log_t = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.c_char_p, ctypes.c_char_p)

        def log(level, _sub, _file, _line, _fmt, msg):
            kind = "WARN" if level == 2 else "INFO"
            lines.append(f"{pre} NCCL {kind} {(msg or b'').decode(errors='replace')}")

        logger = log_t(log)
        ctx = ctypes.c_void_p()
        tc = ctypes.c_int(-1)  # NCCL_NET_TRAFFIC_CLASS_UNDEF
        rc = init_t(fns[1])(ctypes.byref(ctx), 0x5eed + rank, ctypes.byref(tc),
                            ctypes.cast(logger, ctypes.c_void_p), None)
        ndev = ctypes.c_int(0)
        if rc == 0:
            rc2 = dev_t(fns[2])(ctypes.byref(ndev))
        if rc != 0 or rc2 != 0 or ndev.value <= 0:
            lines.append(f"{pre} NCCL INFO Failed to initialize NET plugin Sluice")
            lines.append(f"{pre} plugin/net.cc:372 NCCL WARN Failed to initialize any NET plugin")
            err = ("DistBackendError: NCCL error in: ProcessGroupNCCL.cpp, invalid usage, "
                   "NCCL version 2.28 [stand-in] Last error: Failed to initialize any NET plugin")
        else:
            lines.append(f"{pre} NCCL INFO Initialized NET plugin Sluice")
            lines.append(f"{pre} NCCL INFO Assigned NET plugin Sluice to comm")
            err = (f"[stand-in] the plugin found {ndev.value} device(s), but without PyTorch and a "
                   "GPU no all-reduce can run here")
    except OSError as e:
        lines.append(f"{pre} NCCL INFO NET/Plugin: Could not load {plugin}: {e}")
        lines.append(f"{pre} plugin/net.cc:372 NCCL WARN Failed to initialize any NET plugin")
        err = f"[stand-in] dlopen({plugin}) failed: {e}"
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"TORCH_NCCL: ERROR [stand-in] {err}", flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main())
