"""Device probe: nvFuser version, profiler API and kernel names, in one small run."""
import torch, nvfuser_direct as nvf
print("nvfuser", nvf.__version__, "torch", torch.__version__, torch.cuda.get_device_name())
x = torch.randn(64, 128, device="cuda")
with nvf.FusionDefinition() as fd:
    t = fd.define_tensor(sizes=list(x.shape), strides=list(x.stride()), dtype=nvf.DataType.Float)
    s = fd.ops.sum(t, [0], False, nvf.DataType.Null)
    y = fd.ops.mul(t, fd.define_scalar(2.0, dtype=nvf.DataType.Double))
    fd.add_output(s); fd.add_output(fd.ops.stride_order(y, [0, 1]))
print(fd)
out = fd.execute([x])
print([o.stride() for o in out], torch.allclose(out[0], x.sum(0)))
try:
    with nvf.PythonProfiler() as prof:
        fd.execute([x])
    p = prof.profile
    print("segments", p.segments, [(k.name, k.scheduler, k.time_ms, k.compile_time_ms, k.segment_id) for k in p.kernel_profiles])
except Exception as e:
    print("PROFILER FAILED", type(e).__name__, e)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as tp:
    fd.execute([x]); torch.cuda.synchronize()
print("torch.profiler kernels", [e.name for e in tp.events() if e.device_type == torch.autograd.DeviceType.CUDA])
print("fec methods", [m for m in dir(fd.fec) if not m.startswith("_")])
try:
    print(fd.fec.get_most_recent_scheduled_ir()[:300])
except Exception as e:
    print("sched ir failed", e)
import time
fec = fd.fec
for _ in range(100): fec.execute([x])
torch.cuda.synchronize(); t0 = time.perf_counter()
for _ in range(1000): fec.execute([x])
t1 = time.perf_counter(); torch.cuda.synchronize()
print("fec.execute host us", (t1 - t0) * 1e3)
