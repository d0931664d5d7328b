#!/usr/bin/env python3
"""One rank of tests/gpu/run.sh's NCCL step: PyTorch's NCCL (torch.distributed, backend nccl)
between two processes on the one GPU, made to look like two hosts by NCCL_HOSTID (run.sh sets it,
with NCCL_NET_PLUGIN=<bundle>/libnccl-net-sluice.so NCCL_NET=Sluice NCCL_P2P_DISABLE=1
NCCL_SHM_DISABLE=1 and NCCL_DEBUG_FILE). Every all-reduce result is checked, element by element,
over several sizes and dtypes; the values are small integers, so every dtype sums them exactly.

  RANK=0|1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=N python3 nccl_torch.py

Prints "RESULT <dtype> <elements>: OK|BAD <wrong> wrong" per case and a last line
"TORCH_NCCL: PASS ..." or "TORCH_NCCL: FAIL ..." or "TORCH_NCCL: ERROR <exception>".
Exit 0 all correct, 1 a wrong result, 3 an exception (NCCL refused, a timeout, ...)."""
import datetime
import os
import sys
import traceback


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ["MASTER_PORT"])
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001 - report exactly what failed
        print(f"TORCH_NCCL: ERROR import torch failed: {e!r}", flush=True)
        return 3
    try:
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        print(f"rank {rank}: torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.get_device_name(0)}",
              flush=True)
        dist.init_process_group("nccl", init_method=f"tcp://{addr}:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=75),
                                device_id=dev)
        dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                  torch.int64, torch.uint8]
        sizes = [1, 7, 1000, 65536 + 3, 1 << 20, (8 << 20) + 5]
        bad_cases = 0
        for dtype in dtypes:
            for n in sizes:
                if dtype == torch.uint8 and n > (1 << 20):
                    continue
                idx = torch.arange(n, device=dev, dtype=torch.int64)
                # rank r contributes (i % 5) + r + 1: at most 6 per rank, sums exact in any dtype
                x = ((idx % 5) + rank + 1).to(dtype)
                dist.all_reduce(x, op=dist.ReduceOp.SUM)
                want = ((idx % 5) * world + world * (world + 1) // 2).to(dtype)
                wrong = int((x != want).sum().item())
                print(f"RESULT {str(dtype).replace('torch.', '')} {n}: "
                      f"{'OK' if wrong == 0 else 'BAD'} {wrong} wrong", flush=True)
                bad_cases += wrong != 0
        torch.cuda.synchronize()
        dist.barrier()
        dist.destroy_process_group()
        cases = sum(1 for d in dtypes for n in sizes if not (d == torch.uint8 and n > (1 << 20)))
        if bad_cases:
            print(f"TORCH_NCCL: FAIL {bad_cases} of {cases} all-reduce cases wrong", flush=True)
            return 1
        print(f"TORCH_NCCL: PASS {cases} all-reduce cases ({len(dtypes)} dtypes, "
              f"1..{sizes[-1]} elements) correct", flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - NCCL's refusal arrives as an exception
        traceback.print_exc()
        msg = " ".join(str(e).split())
        print(f"TORCH_NCCL: ERROR {type(e).__name__}: {msg[:600]}", flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())
