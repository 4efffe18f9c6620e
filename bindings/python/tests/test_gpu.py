"""The binding on a CUDA GPU (skipped without torch.cuda): torch CUDA tensors through dsv4.torch,
Plan.run and DLPack exports; CuPy (when installed); __cuda_array_interface__ v3 streams; runs on a
non-default stream while the default stream is busy; the DLPack stream protocol ordering the
producer's pending work; CUDA graph capture and replay with new inputs; the custom op under
torch.compile; bad input (another GPU, a CPU tensor, a wrong dtype, a non-contiguous last dim)
rejected with an exception naming the argument and nothing written. Every result is checked
against the float64 reference. scripts/gpu/python_gpu.sh runs this on a GPU machine."""
import unittest

import torch

import cases
import dsv4
import dsv4.torch as dt
import reference

CUDA = torch.cuda.is_available()
SLEEP_CYCLES = 200_000_000  # ~0.1 s of torch.cuda._sleep on a ~2 GHz GPU


def _problem(offset, **kwargs):
    options = dict(tokens=16, heads=64, layout=dsv4.KvLayout.FP8_V4_584B, block_size=64,
                   blocks=6, width=128,
                   extra=dict(layout=dsv4.KvLayout.FP8_V4_584B, block_size=64, blocks=9,
                              width=192))
    options.update(kwargs)
    return cases.Explicit(cases.seed(offset), **options)


class _Dlpack:
    """Only the DLPack protocol of a torch tensor (so the binding cannot read it directly)."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.streams = []

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, stream=None, **kwargs):
        self.streams.append(stream)
        return self.tensor.__dlpack__(stream=stream, **kwargs)


class _Interface:
    """__cuda_array_interface__ v3 of a torch CUDA tensor, ready on `stream` (a handle)."""

    def __init__(self, tensor, stream, typestr):
        self.tensor = tensor
        size = tensor.element_size()
        self.__cuda_array_interface__ = dict(
            data=(tensor.data_ptr(), False), shape=tuple(tensor.shape),
            strides=tuple(s * size for s in tensor.stride()), typestr=typestr, version=3,
            stream=stream)


@unittest.skipUnless(CUDA, "no CUDA device for torch")
class GpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.device = torch.device("cuda", 0)
        cls.ctx = dt.context(cls.device)
        if cls.ctx.info.backend != "cuda":
            raise AssertionError("context on cuda:0 chose %r" % cls.ctx.info.backend)

    def check(self, problem, out, lse, what, sink=True):
        torch.cuda.synchronize()
        cases.check(self, out, lse, problem.reference(sink), "%s, %s" % (what,
                                                                          problem.describe()))

    def test_torch_front_layouts(self):
        for offset, options in enumerate((
                dict(),
                dict(layout=dsv4.KvLayout.BF16, block_size=17, extra=None, heads=8),
                dict(heads=128, tokens=4, sink="finite", lengths=False),
                dict(layout=dsv4.KvLayout.FP8_E4M3_PER_TENSOR, block_size=5, extra=None,
                     heads=32))):
            problem = _problem(100 + offset, **options)
            plan = dsv4.Plan(self.ctx, **problem.plan_options())
            inputs = problem.tensors(self.device)
            out, lse = dt.attention(plan, inputs.pop("q"), inputs.pop("swa_cache"), **inputs)
            self.check(problem, out, lse, "layout case %d (%s)" % (offset, plan.info.kernel))

    def test_plan_run_with_dlpack_exports(self):
        problem = _problem(110)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        out = torch.empty(16, 64, 512, dtype=torch.bfloat16, device=self.device)
        lse = torch.empty(16, 64, device=self.device)
        wrapped = {name: _Dlpack(value) if value is not None else None
                   for name, value in dict(inputs, out=out, lse=lse).items()}
        plan.run(workspace=plan.workspace(torch.cuda.current_stream().cuda_stream), **wrapped)
        current = torch.cuda.current_stream().cuda_stream
        for name, value in wrapped.items():
            if value is not None:
                expected = current if current else 1  # DLPack's legacy default stream is 1
                self.assertEqual(value.streams, [expected], name)
        self.check(problem, out, lse, "DLPack")

    def test_cupy(self):
        try:
            import cupy
        except ImportError:
            self.skipTest("CuPy is not installed")
        problem = _problem(120)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        arrays = {name: cupy.asarray(value.view(torch.int16) if value.dtype == torch.bfloat16
                                     else value)
                  for name, value in inputs.items() if value is not None}
        arrays["q"] = dsv4.as_tensor(arrays["q"], dtype="bfloat16")
        out = cupy.zeros((16, 64, 512), dtype=cupy.uint16)
        lse = cupy.zeros((16, 64), dtype=cupy.float32)
        plan.run(out=dsv4.as_tensor(out, dtype="bfloat16"), lse=lse, **arrays)  # CuPy workspace
        cupy.cuda.get_current_stream().synchronize()
        got = torch.as_tensor(out.get().view("int16")).view(torch.bfloat16)
        cases.check(self, got, torch.as_tensor(lse.get()), problem.reference(),
                    "CuPy, " + problem.describe())

    def test_cuda_array_interface_stream_is_waited_for(self):
        problem = _problem(130)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        producer = torch.cuda.Stream()
        q = torch.zeros_like(inputs["q"])
        producer.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(producer):
            torch.cuda._sleep(SLEEP_CYCLES)  # q is written late on the producer's stream
            q.copy_(inputs["q"])
        inputs["q"] = dsv4.Tensor.from_cuda_array_interface(
            _Interface(q.view(torch.int16), producer.cuda_stream, "<i2"), "bfloat16")
        out = torch.empty(16, 64, 512, dtype=torch.bfloat16, device=self.device)
        lse = torch.empty(16, 64, device=self.device)
        plan.run(out=out, lse=lse, **inputs)  # on torch's current stream, after the producer's
        self.check(problem, out, lse, "__cuda_array_interface__ stream")

    def test_non_default_stream_while_the_default_stream_is_busy(self):
        problem = _problem(140)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        side = torch.cuda.Stream()
        plan.workspace(side.cuda_stream)
        torch.cuda.synchronize()
        busy_done = torch.cuda.Event()
        torch.cuda._sleep(SLEEP_CYCLES)  # the default stream is busy ...
        busy_done.record()
        with torch.cuda.stream(side):   # ... while the run goes on the side stream
            out, lse = dt.attention(plan, inputs.pop("q"), inputs.pop("swa_cache"), **inputs)
        side.synchronize()
        self.assertFalse(busy_done.query(), "the run waited for the default stream")
        self.check(problem, out, lse, "side stream")

    def test_explicit_stream_waits_for_the_producer(self):
        problem = _problem(150)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        final_q = inputs["q"]
        q = torch.zeros_like(final_q)
        torch.cuda._sleep(SLEEP_CYCLES)  # q gets its values late on the current stream
        q.copy_(final_q)
        side = torch.cuda.Stream()
        out = torch.empty(16, 64, 512, dtype=torch.bfloat16, device=self.device)
        lse = torch.empty(16, 64, device=self.device)
        inputs["q"] = q
        plan.run(stream=side, out=out, lse=lse, **inputs)           # torch tensors, read directly
        out2 = torch.empty_like(out)
        lse2 = torch.empty_like(lse)
        wrapped = {k: _Dlpack(v) if v is not None else None for k, v in inputs.items()}
        plan.run(stream=side.cuda_stream, out=_Dlpack(out2), lse=_Dlpack(lse2),  # no torch
                 workspace=plan.workspace(side.cuda_stream), **wrapped)     # tensor: DLPack only
        self.check(problem, out, lse, "explicit stream, torch")
        self.check(problem, out2, lse2, "explicit stream, DLPack")

    def test_graph_capture_and_replay_with_new_inputs(self):
        problem = _problem(160)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        static = problem.tensors(self.device)
        q, cache = static.pop("q"), static.pop("swa_cache")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (and the workspace) on the capture's stream
            dt.attention(plan, q, cache, **static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out, lse = dt.attention(plan, q, cache, **static)
        for offset in range(3):
            # Another problem of the same geometry: new queries, caches, lists, lengths, sinks.
            fresh = _problem(161 + offset)
            new = fresh.tensors(self.device)
            q.copy_(new.pop("q"))
            cache.copy_(new.pop("swa_cache"))
            for name, value in new.items():
                static[name].copy_(value)
            out.fill_(7.0)
            graph.replay()
            self.check(fresh, out, lse, "replay %d" % offset)

    @unittest.skipUnless(dt.HAS_CUSTOM_OP, "torch without torch.library.register_fake")
    def test_custom_op_under_torch_compile(self):
        problem = _problem(170)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        q, cache = inputs.pop("q"), inputs.pop("swa_cache")

        def layer(q, cache):
            out, lse = dt.attention(plan, q * 1, cache, **inputs)
            return out.float().sum(-1), out, lse

        compiled = torch.compile(layer, fullgraph=True)
        for scale in (1.0, -0.5):
            q_now = (q.float() * scale).to(torch.bfloat16)
            total, out, lse = compiled(q_now, cache)
            torch.cuda.synchronize()
            want = reference.attention(q_now, problem.main.reference_cache(),
                                       problem.main.indices, problem.main.lengths,
                                       problem.extra.reference_cache(), problem.extra.indices,
                                       problem.extra.lengths, problem.sink)
            cases.check(self, out, lse, want, "compiled, scale %g, %s" % (scale,
                                                                          problem.describe()))
            self.assertTrue(torch.allclose(total, out.float().sum(-1)))

    def test_workspace_once_per_plan_and_stream(self):
        problem = _problem(180)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        q, cache = inputs.pop("q"), inputs.pop("swa_cache")
        if not plan.workspace_size:
            self.skipTest("this plan needs no workspace")
        for _ in range(3):
            dt.attention(plan, q, cache, **inputs)
        self.assertEqual(len(plan._device_workspaces), 1)
        with torch.cuda.stream(torch.cuda.Stream()):
            out, lse = dt.attention(plan, q, cache, **inputs)
        self.assertEqual(len(plan._device_workspaces), 2)
        workspace = plan.workspace(torch.cuda.current_stream().cuda_stream)
        self.assertEqual((workspace.device, workspace.dtype), (self.device, torch.uint8))
        self.check(problem, out, lse, "second stream")

    def test_bad_input_names_the_argument_and_writes_nothing(self):
        problem = _problem(190, tokens=4, heads=16)
        plan = dsv4.Plan(self.ctx, **problem.plan_options())
        inputs = problem.tensors(self.device)
        out = torch.full((4, 16, 512), 7.0, dtype=torch.bfloat16, device=self.device)
        lse = torch.full((4, 16), 7.0, device=self.device)

        def rejected(error, argument, **changes):
            call = dict(inputs, out=out, lse=lse)
            call.update(changes)
            with self.assertRaises(error) as caught:
                plan.run(**call)
            self.assertIn(argument, str(caught.exception))
            torch.cuda.synchronize()
            self.assertTrue(bool((out == 7).all()) and bool((lse == 7).all()), argument)

        rejected(ValueError, "q", q=inputs["q"].cpu())                       # a CPU tensor
        rejected(ValueError, "indices", indices=_Dlpack(inputs["indices"].cpu()))
        other = dsv4.Tensor(inputs["q"].data_ptr(), inputs["q"].shape, "bfloat16",
                            device=(dsv4.DeviceType.CUDA, 1))             # "another GPU"
        rejected(ValueError, "q", q=other)
        if torch.cuda.device_count() > 1:
            rejected(ValueError, "swa_cache", swa_cache=inputs["swa_cache"].to("cuda:1"))
        rejected(dsv4.Dsv4Error, "q", q=inputs["q"].float())                 # wrong dtype
        wide = torch.zeros(4, 16, 1024, dtype=torch.bfloat16, device=self.device)
        rejected(dsv4.Dsv4Error, "q", q=wide[..., ::2])                      # last dim strided
        rejected(dsv4.Dsv4Error, "lse", lse=torch.zeros(16, 4, device=self.device))  # [H, T]


if __name__ == "__main__":
    unittest.main()
