"""The merge op (spec 12.2): attention over a key set split into 2-8 random disjoint parts, each
part attended without the sink, the partial (out, lse) merged with the sink applied once, equals
attention over the whole set (float64 reference, spec 2.4), with and without a sink (finite,
-inf and +inf sinks; parts and tokens without any key). On the CPU, and on CUDA when torch has it.

Parts in fp32 (from the reference) are held to the spec's tolerances as they are. Parts from
dsv4_run are bf16: their own rounding (at most half an ulp, 2^-8 relative, of each part) reaches the
merged value weighted by exp(lse_p - lse), so the element rule gets that bound added to its
tolerance; where parts are large and of opposite signs it exceeds the spec's. At the data's scale
(FlashMLA's, cases.kv_values) the bound stays around or below the absolute tolerance, so the check
is still close to the spec's rule: a merge that drops the sink or is 1% off fails it."""
import math
import random
import unittest

import torch

import cases
import dsv4
import dsv4.torch as dt
import reference

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
LAYOUTS = (dsv4.KvLayout.BF16, dsv4.KvLayout.FP8_V4_584B)


def split_lists(rng, indices, lengths, parts):
    """`parts` lists over disjoint subsets of each row's positions (the rest -1), the lengths
    kept: every valid candidate of the whole list lands in exactly one part."""
    owner = torch.tensor([[rng.randrange(parts) for _ in range(indices.shape[1])]
                          for _ in range(indices.shape[0])])
    return [(torch.where(owner == p, indices, torch.full_like(indices, -1)), lengths)
            for p in range(parts)]


def check_merged_bf16_parts(testcase, out, lse, out_parts, lse_parts, want, what):
    """The spec's element rule (abs or rel) widened by the parts' own bf16 rounding,
    sum_p exp(lse_p - lse) |o_p| 2^-8 (the sink only scales it down); lse as it is."""
    parts = reference.host(out_parts, torch.float64)
    part_lse = reference.host(lse_parts, torch.float64)
    merged_lse = reference.host(lse, torch.float64)[None].expand_as(part_lse)
    used = torch.isfinite(part_lse) & torch.isfinite(merged_lse)  # +inf: an empty part or token
    weights = torch.zeros_like(part_lse)
    weights[used] = torch.exp(part_lse[used] - merged_lse[used])
    bound = (weights[..., None] * parts.abs()).sum(0) * 2.0 ** -8
    got, want_out = reference.host(out, torch.float64), want[0]
    abs_tol, rel_tol, cos_tol = reference.DECODE_OUT
    error = (got - want_out).abs()
    finite = torch.isfinite(want_out)
    ok = ~finite & (got == want_out) | finite & (
        error < torch.clamp(rel_tol * want_out.abs(), min=abs_tol) + bound)
    bad = torch.nonzero(~ok).tolist()
    first = tuple(bad[0]) if bad else None
    testcase.assertEqual(len(bad), 0, "out %s: %d elements beyond tolerance + rounding bound, "
                         "first %s: got %r want %r bound %r" % (
                             what, len(bad), first, got[first].item() if bad else None,
                             want_out[first].item() if bad else None,
                             bound[first].item() if bad else None))
    cos = reference.compare(got, want_out, (math.inf, math.inf, cos_tol), "out " + what)
    testcase.assertTrue(cos.passed, str(cos))
    lse_result = reference.compare(lse, want[1], reference.DECODE_LSE, "lse " + what)
    testcase.assertTrue(lse_result.passed, str(lse_result))


def random_problem(seed_value, rng, trial):
    return cases.Explicit(
        seed_value, tokens=rng.randint(1, 9), heads=rng.choice((1, 3, 16, 64)),
        layout=rng.choice(LAYOUTS), block_size=rng.choice((1, 5, 64)), blocks=rng.randint(3, 9),
        width=rng.randint(4, 40), sink=rng.choice(("mixed", "finite")),
        extra=None if trial % 2 else dict(layout=rng.choice(LAYOUTS),
                                          block_size=rng.choice((2, 7)), blocks=5,
                                          width=rng.randint(1, 30)))


class MergeTest(unittest.TestCase):
    def parts(self, problem, device, parts, rng, from_reference):
        """(out_parts, lse_parts) of `parts` random disjoint splits of every token's lists, from
        dsv4_run (bf16) or from the float64 reference (fp32)."""
        main = split_lists(rng, problem.main.indices, problem.main.lengths, parts)
        extra = split_lists(rng, problem.extra.indices, problem.extra.lengths, parts) \
            if problem.extra else [(None, None)] * parts
        shape = (parts, problem.tokens, problem.heads)
        if from_reference:
            out_parts = torch.empty(shape + (512,), dtype=torch.float32)
            lse_parts = torch.empty(shape)
            for p in range(parts):
                e = problem.extra
                o, l, _ = reference.attention(
                    problem.q, problem.main.reference_cache(), main[p][0], main[p][1],
                    e.reference_cache() if e else None, extra[p][0], extra[p][1])
                out_parts[p], lse_parts[p] = o, l
            return out_parts.to(device), lse_parts.to(device)
        ctx = dt.context(device) if device != "cpu" else dt.context("cpu", backend="cpu")
        plan = dsv4.Plan(ctx, **problem.plan_options())
        inputs = problem.tensors(device)
        out_parts = torch.empty(shape + (512,), dtype=torch.bfloat16, device=device)
        lse_parts = torch.empty(shape, device=device)
        for p in range(parts):
            part = dict(inputs, attn_sink=None, indices=main[p][0].to(device))
            if problem.extra:
                part["extra_indices"] = extra[p][0].to(device)
            q, cache = part.pop("q"), part.pop("swa_cache")
            dt.attention(plan, q, cache, out=out_parts[p], lse=lse_parts[p], **part)
        return out_parts, lse_parts

    def test_split_and_merged_equals_whole(self):
        for device in DEVICES:
            for trial in range(8):
                rng = random.Random(cases.seed(300 + trial))
                parts = rng.randint(2, 8)
                sink = trial % 3 != 2
                from_reference = trial % 2 == 1
                problem = random_problem(cases.seed(300 + trial), rng, trial // 2)
                out_parts, lse_parts = self.parts(problem, device, parts, rng, from_reference)
                sink_tensor = problem.sink.to(device) if sink else None
                out, lse = dt.merge(out_parts, lse_parts, attn_sink=sink_tensor)
                what = "%s, %d %s parts, sink %s, %s" % (
                    device, parts, "fp32" if from_reference else "bf16", sink, problem.describe())
                want = problem.reference(sink)
                if from_reference:
                    cases.check(self, out, lse, want, what)
                else:
                    check_merged_bf16_parts(self, out, lse, out_parts, lse_parts, want, what)

    def test_empty_and_infinite_parts(self):
        # Every token of the second part has no key (lse +inf); the whole set of token 0 is empty.
        problem = cases.Explicit(cases.seed(350), tokens=4, heads=8, width=12)
        problem.main.indices[0] = -1
        for device in DEVICES:
            rng = random.Random(cases.seed(351))
            ctx = dt.context(device) if device != "cpu" else dt.context("cpu", backend="cpu")
            plan = dsv4.Plan(ctx, **problem.plan_options())
            inputs = problem.tensors(device)
            q, cache = inputs.pop("q"), inputs.pop("swa_cache")
            sink = inputs.pop("attn_sink")
            inputs["indices"] = torch.full_like(inputs["indices"], -1)
            _, empty_lse = dt.attention(plan, q, cache, **inputs)
            self.assertTrue(bool(torch.isinf(empty_lse).all()))
            whole = split_lists(rng, problem.main.indices, problem.main.lengths, 1)[0][0]
            inputs["indices"] = whole.to(device)
            full_out, full_lse = dt.attention(plan, q, cache, **inputs)
            out_parts = torch.stack([full_out, torch.zeros_like(full_out)])
            lse_parts = torch.stack([full_lse, empty_lse])
            out, lse = dt.merge(out_parts, lse_parts, attn_sink=sink)
            cases.check(self, out.cpu(), lse.cpu(), problem.reference(),
                        "%s, an empty part, %s" % (device, problem.describe()))
            self.assertTrue(bool((out[0] == 0).all()) and bool(torch.isinf(lse[0]).all()))

    def test_repeated_merges_match_the_general_path(self):
        # The torch fast path reuses one argument struct per geometry with each call's pointers:
        # new values of one geometry, then other part counts and strided parts, each bit for bit
        # the general path's result (a stream given takes the general path).
        gen = torch.Generator().manual_seed(cases.seed(360))
        for device in DEVICES:
            ctx = dt.context(device) if device != "cpu" else dt.context("cpu", backend="cpu")
            shapes = ((3, 5, 4, False), (2, 5, 4, False), (3, 5, 4, True), (4, 2, 16, False))
            for parts, tokens, heads, strided in shapes * 3:
                rows = 2 * tokens if strided else tokens
                out_parts = torch.randn(parts, rows, heads, 512, generator=gen)
                out_parts = out_parts[:, ::2] if strided else out_parts  # token stride doubled
                out_parts = out_parts.to(device)
                lse_parts = (torch.randn(parts, tokens, heads, generator=gen) * 4).to(device)
                lse_parts[0, 0] = float("inf")  # a part without keys
                sink = torch.randn(heads, generator=gen).to(device)
                fast = dt.merge(out_parts, lse_parts, attn_sink=sink)
                general = (torch.empty_like(fast[0]), torch.empty_like(fast[1]))
                dsv4.merge(ctx, stream=0, out_parts=out_parts, lse_parts=lse_parts,
                           attn_sink=sink, out=general[0], lse=general[1])
                what = "%s, %d parts, %d x %d%s" % (device, parts, tokens, heads,
                                                     ", strided" if strided else "")
                self.assertTrue(torch.equal(fast[0], general[0]), what)
                self.assertTrue(torch.equal(fast[1], general[1]), what)

    def test_token_dimensions_are_flattened(self):
        # [P, B, S, H, 512] parts (as runs of [B, S, H, 512] give them) merge as [P, B*S, H, 512].
        gen = torch.Generator().manual_seed(cases.seed(370))
        for device in DEVICES:
            out_parts = torch.randn(3, 2, 3, 4, 512, generator=gen).to(device)
            lse_parts = torch.randn(3, 2, 3, 4, generator=gen).to(device)
            sink = torch.randn(4, generator=gen).to(device)
            out, lse = dt.merge(out_parts, lse_parts, attn_sink=sink)
            flat_out, flat_lse = dt.merge(out_parts.view(3, 6, 4, 512), lse_parts.view(3, 6, 4),
                                          attn_sink=sink)
            self.assertEqual(tuple(out.shape), (2, 3, 4, 512))
            self.assertTrue(torch.equal(out.view(6, 4, 512), flat_out), device)
            self.assertTrue(torch.equal(lse.view(6, 4), flat_lse), device)
            given = torch.empty(3, 2, 4, 512, dtype=torch.bfloat16, device=device).transpose(0, 1)
            with self.assertRaisesRegex(ValueError, "out"):  # cannot be a view of [6, 4, 512]
                dt.merge(out_parts, lse_parts, out=given)

    def test_bad_input_names_the_argument(self):
        out_parts = torch.zeros(2, 3, 4, 512, dtype=torch.bfloat16)
        lse_parts = torch.zeros(2, 3, 4)
        out = torch.full((3, 4, 512), 7.0, dtype=torch.bfloat16)
        lse = torch.full((3, 4), 7.0)
        for bad, argument in ((dict(lse_parts=torch.zeros(2, 3, 5)), "lse"),
                              (dict(out=torch.zeros(3, 4, 512)), "out"),
                              (dict(attn_sink=torch.zeros(5)), "sink")):
            call = dict(out_parts=out_parts, lse_parts=lse_parts, out=out, lse=lse)
            call.update(bad)
            with self.assertRaises((dsv4.Dsv4Error, ValueError)) as caught:
                dt.merge(**call)
            self.assertIn(argument, str(caught.exception))
            self.assertTrue(bool((out == 7).all()) and bool((lse == 7).all()))


if __name__ == "__main__":
    unittest.main()
