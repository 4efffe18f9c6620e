"""The merge op (spec 12.2): attention over a key set split into 2-8 random disjoint parts, each
part run without the sink, the partial (out, lse) merged with the sink applied once, equals
attention over the whole set (float64 reference, spec 2.4 tolerances), with and without a sink
(finite, -inf and +inf sinks; parts and tokens without any key). On the CPU, and on CUDA when
torch has it (the same cases)."""
import random
import unittest

import torch

import cases
import dsv4
import dsv4.torch as dt

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
HAS_MERGE = hasattr(dsv4.load_library(), "dsv4_merge")
LAYOUTS = (dsv4.KvLayout.BF16, dsv4.KvLayout.FP8_V4_584B)


def split_lists(rng, indices, lengths, parts):
    """`parts` lists over disjoint subsets of each row's positions (the rest -1), the lengths
    kept: every valid candidate of the whole list lands in exactly one part."""
    owner = torch.tensor([[rng.randrange(parts) for _ in range(indices.shape[1])]
                          for _ in range(indices.shape[0])])
    return [(torch.where(owner == p, indices, torch.full_like(indices, -1)), lengths)
            for p in range(parts)]


@unittest.skipUnless(HAS_MERGE, "this libdsv4 has no dsv4_merge")
class MergeTest(unittest.TestCase):
    def merged(self, problem, device, parts, rng, sink):
        """Runs the parts and merges them; returns (out, lse) on the host."""
        ctx = dt.context(device) if device != "cpu" else dt.context("cpu", backend="cpu")
        plan = dsv4.Plan(ctx, **problem.plan_options())
        inputs = problem.tensors(device)
        main = split_lists(rng, problem.main.indices, problem.main.lengths, parts)
        extra = split_lists(rng, problem.extra.indices, problem.extra.lengths, parts) \
            if problem.extra else [(None, None)] * parts
        shape = (problem.tokens, problem.heads)
        out_parts = torch.empty((parts,) + shape + (512,), dtype=torch.bfloat16, device=device)
        lse_parts = torch.empty((parts,) + shape, device=device)
        for p in range(parts):
            part = dict(inputs, attn_sink=None, indices=main[p][0].to(device))
            if problem.extra:
                part["extra_indices"] = extra[p][0].to(device)
            q, cache = part.pop("q"), part.pop("swa_cache")
            dt.attention(plan, q, cache, out=out_parts[p], lse=lse_parts[p], **part)
        out, lse = dt.merge(out_parts, lse_parts,
                            attn_sink=inputs["attn_sink"] if sink else None)
        return out.cpu(), lse.cpu()

    def test_split_and_merged_equals_whole(self):
        for device in DEVICES:
            for trial in range(6):
                rng = random.Random(cases.seed(300 + trial))
                parts = rng.randint(2, 8)
                sink = trial % 3 != 2
                problem = cases.Explicit(
                    cases.seed(300 + trial), tokens=rng.randint(1, 9),
                    heads=rng.choice((1, 3, 16, 64)), layout=rng.choice(LAYOUTS),
                    block_size=rng.choice((1, 5, 64)), blocks=rng.randint(3, 9),
                    width=rng.randint(4, 40), sink=rng.choice(("mixed", "finite")),
                    extra=None if trial % 2 else dict(layout=rng.choice(LAYOUTS),
                                                      block_size=rng.choice((2, 7)), blocks=5,
                                                      width=rng.randint(1, 30)))
                out, lse = self.merged(problem, device, parts, rng, sink)
                what = "%s, %d parts, sink %s, %s" % (device, parts, sink, problem.describe())
                cases.check(self, out, lse, problem.reference(sink), what)

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
