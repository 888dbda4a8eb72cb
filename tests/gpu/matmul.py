"""A PyTorch CUDA matmul, timed: the GPU check's workload (tests/gpu/check.sh)."""

import sys
import time

try:
    import torch
except ImportError:
    print("matmul: no torch on this machine")
    sys.exit(3)
if not torch.cuda.is_available():
    print(f"matmul: CUDA unavailable ({torch.cuda.device_count()} devices)")
    sys.exit(2)
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(20):
    c = a @ b
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"matmul: {torch.cuda.get_device_name(0)}, 20 x 8192^2 fp32 in {dt:.3f} s, sum {float(c.sum()):.3e}")
