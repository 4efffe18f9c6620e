"""dsv4.torch on CPU tensors (any torch, Debian's 1.13 included): explicit mode against the
float64 reference, outputs allocated or given, max_logits, the stream and argument rules, and the
custom ops where this torch has torch.library.register_fake (traced by torch.compile's aot_eager
backend, which needs no compiler). Paged mode through dsv4.torch: examples/python/vllm_step.py."""
import unittest

import torch

import cases
import dsv4
import dsv4.torch as dt
import reference


class TorchFrontTest(unittest.TestCase):
    def setUp(self):
        self.problem = cases.Explicit(
            cases.seed(21), tokens=6, heads=3, block_size=9, blocks=5, width=20,
            extra=dict(layout=dsv4.KvLayout.FP8_V4_584B, block_size=3, blocks=11, width=12))
        self.plan = dt.plan("cpu", backend="cpu", **self.problem.plan_options())
        self.addCleanup(self.plan.close)
        self.inputs = self.problem.tensors()
        self.want = self.problem.reference()

    def call(self, **kwargs):
        inputs = dict(self.inputs, **kwargs)
        return dt.attention(self.plan, inputs.pop("q"), inputs.pop("swa_cache"), **inputs)

    def test_outputs_allocated(self):
        out, lse = self.call()
        self.assertEqual((out.shape, out.dtype), ((6, 3, 512), torch.bfloat16))
        self.assertEqual((lse.shape, lse.dtype), ((6, 3), torch.float32))
        cases.check(self, out, lse, self.want, self.problem.describe())

    def test_outputs_given_and_max_logits(self):
        out = torch.full((6, 3, 512), 3.0, dtype=torch.bfloat16)
        lse = torch.zeros(6, 3)
        max_logits = torch.zeros(6, 3)
        got_out, got_lse = self.call(out=out, lse=lse, max_logits=max_logits)
        self.assertIs(got_out, out)
        self.assertIs(got_lse, lse)
        cases.check(self, out, lse, self.want, self.problem.describe())
        result = reference.compare(max_logits, self.want[2], reference.DECODE_LSE, "max_logits")
        self.assertTrue(result.passed, str(result))

    def test_a_4d_query_and_its_outputs(self):
        inputs = dict(self.inputs)
        q = inputs.pop("q").view(2, 3, 3, 512)  # [B, S, H, d]: tokens b * S + s
        out, lse = dt.attention(self.plan, q, inputs.pop("swa_cache"), **inputs)
        self.assertEqual((out.shape, lse.shape), ((2, 3, 3, 512), (2, 3, 3)))
        cases.check(self, out.view(6, 3, 512), lse.view(6, 3), self.want,
                    self.problem.describe())

    def test_repeated_calls_take_each_calls_tensors(self):
        # Same geometry (the cached argument struct) with new tensors, then new strides.
        problem = self.problem
        inputs = dict(self.inputs)
        q0, cache = inputs.pop("q"), inputs.pop("swa_cache")
        wide = torch.zeros(6, 3, 1024, dtype=torch.bfloat16)
        for step, q in enumerate((q0, (q0.float() * -0.5).to(torch.bfloat16), None)):
            if q is None:
                wide[..., 512:] = q0
                q = wide[..., 512:]  # a view with other strides and an offset
            out, lse = dt.attention(self.plan, q, cache, **inputs)
            want = reference.attention(q, problem.main.reference_cache(), problem.main.indices,
                                       problem.main.lengths, problem.extra.reference_cache(),
                                       problem.extra.indices, problem.extra.lengths,
                                       problem.sink)
            cases.check(self, out, lse, want, "call %d, %s" % (step, problem.describe()))

    def test_argument_rules(self):
        with self.assertRaisesRegex(TypeError, "no_such"):
            dt.run(self.plan, self.inputs["q"], no_such=torch.zeros(1))
        with self.assertRaises(dsv4.Dsv4Error) as caught:
            self.call(lengths=self.inputs["lengths"][:2])  # [2] for 6 tokens
        self.assertIn("lengths", str(caught.exception))

    def test_plans_and_contexts(self):
        self.assertIs(dt.context("cpu", backend="cpu"), self.plan.ctx)
        self.assertIs(dsv4.plan_by_id(self.plan.id), self.plan)
        other = dt.plan("cpu", backend="cpu", **self.problem.plan_options())
        self.assertNotEqual(other.id, self.plan.id)
        other_id = other.id
        del other
        with self.assertRaisesRegex(ValueError, "plan"):
            dsv4.plan_by_id(other_id)

    @unittest.skipUnless(dt.HAS_CUSTOM_OP, "torch %s has no torch.library.register_fake" %
                         torch.__version__)
    def test_eager_calls_skip_the_dispatcher_and_modes_see_the_op(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        seen = []

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(str(func))
                return func(*args, **(kwargs or {}))

        def through_the_dispatcher(*args):
            raise AssertionError("an eager call went through torch.ops.dsv4.run")

        saved = dt._run_op
        dt._run_op = through_the_dispatcher
        try:
            out, lse = self.call()
        finally:
            dt._run_op = saved
        cases.check(self, out, lse, self.want, self.problem.describe())
        with Record():
            out_seen, lse_seen = self.call()
        self.assertIn("dsv4.run.default", seen)
        self.assertTrue(torch.equal(out, out_seen) and torch.equal(lse, lse_seen))

    @unittest.skipUnless(dt.HAS_CUSTOM_OP, "torch %s has no torch.library.register_fake" %
                         torch.__version__)
    def test_custom_op_under_torch_compile(self):
        self.assertIs(dt._run_op, torch.ops.dsv4.run)
        inputs = dict(self.inputs)
        q, cache = inputs.pop("q"), inputs.pop("swa_cache")

        def step(q, cache):
            out, lse = dt.attention(self.plan, q, cache, **inputs)
            return out.float() * 2, lse

        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        for scale in (1.0, 0.5):  # the second call reuses the traced graph with new values
            q_now = (q.float() * scale).to(torch.bfloat16)
            out2, lse = compiled(q_now, cache)
            problem = self.problem
            want = reference.attention(q_now, problem.main.reference_cache(),
                                       problem.main.indices, problem.main.lengths,
                                       problem.extra.reference_cache(), problem.extra.indices,
                                       problem.extra.lengths, problem.sink)
            cases.check(self, out2 / 2, lse, want, "compiled, scale %g, %s" %
                        (scale, problem.describe()))


if __name__ == "__main__":
    unittest.main()
