#!/usr/bin/env python3
"""Measures the two ceilings of the GPU once: device-to-device copy bandwidth
(bytes read + written) and a large bf16 matrix product through cuBLAS, on
random data (zeros run faster and hide the real rate)."""
import json, sys, torch

def timed(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters

def main():
    dev = torch.cuda.get_device_properties(0)
    res = {"gpu": dev.name, "sms": dev.multi_processor_count,
           "memory_gib": round(dev.total_memory / 2**30, 1),
           "torch": torch.__version__, "cuda": torch.version.cuda}
    src = torch.randn(1 << 28, device="cuda")  # 1 GiB of fp32
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), 20)
    res["copy_gb_s"] = round(2 * src.numel() * 4 / t / 1e9, 1)
    for m in (4096, 8192):
        a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
        t = timed(lambda: a @ b, 20)
        res[f"bf16_gemm_{m}_tflops"] = round(2 * m**3 / t / 1e12, 1)
    json.dump(res, sys.stdout, indent=2)
    print()

if __name__ == "__main__":
    main()
