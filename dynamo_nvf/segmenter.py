"""Asks nvFuser, while a graph is planned, whether it could run a region as one kernel.

`nvfuser_direct.schedule.find_compatible_schedulers(fusion, inputs)` lists the schedulers that take a
whole fusion for given inputs; an empty list means nvFuser's segmenter will cut it into several
kernels at boundaries of its own choosing. Planning (passes/split_reductions.py) asks this of norm
backwards too large for its row rules, and cuts them itself where nvFuser would segment anyway.

The question is asked of the region as lowered, before nvFuser's pre-segmentation passes, with
inputs that have the traced values' sizes, strides and dtypes (meta tensors where nvFuser takes them,
else uninitialised CUDA memory). On an H100 (nvfuser_direct 0.2.36, session 25,
scripts/repros/segmenter_oracle.py) it takes 10-350 ms per region, so answers are kept per fusion key
(a model's identical layers ask once), and only regions a rule would act on are asked. The answer
agreed with the segments nvFuser then ran for the norm backwards asked about (one inner_outer_persistent
kernel up to [4096, 16384], none at [2048, 32768]); for other regions it is less reliable (pre-
segmentation passes change them), which is why nothing else asks.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf._compat import hint_int
from dynamo_nvf.passes.fusion_key import region_fusion_key
from dynamo_nvf.settings import Settings

log = logging.getLogger("dynamo_nvf")

#: Answers the oracle gives: the one-kernel schedulers' names ("inner_outer_persistent", ...), empty
#: when nvFuser would segment; None when it could not be asked.
Answer = Optional[tuple[str, ...]]
#: What planning passes receive: the region's nodes (in graph order) of `gm` in, an Answer out.
Oracle = Callable[[GraphModule, list[Node]], Answer]

#: Share of the GPU's free memory that real inputs for one question may take (where meta tensors
#: are refused); a larger region is not asked.
_MAX_FREE_SHARE = 0.25


class SegmenterOracle:
    """One per planned graph set (a compile): keeps its answers by fusion key and its time spent."""

    _answers: dict[str, Answer] = {}  # process-wide: the same region asked by a recompile
    _meta_inputs: Optional[bool] = None  # whether nvFuser took meta tensors (tried once per process)

    def __init__(self) -> None:
        import nvfuser_direct

        self._nvf = nvfuser_direct
        self.asked = 0
        self.spent_ms = 0.0

    def __call__(self, gm: GraphModule, nodes: list[Node]) -> Answer:
        try:
            sub, inputs, _ = fuse_as_graphmodule(gm, nodes, "nvf_segmenter_query")
        except Exception as exc:  # noqa: BLE001 - a question nobody can ask is not an error
            log.debug("segmenter: region of %s not extracted: %s", nodes[0].name, exc)
            return None
        key = region_fusion_key(sub)
        if key in self._answers:
            return self._answers[key]
        start = time.perf_counter()
        answer = self._ask(sub, [n.meta.get("val") for n in inputs])
        self.asked += 1
        self.spent_ms += (time.perf_counter() - start) * 1e3
        self._answers[key] = answer
        log.debug("segmenter: region of %s (key %s): %s", nodes[0].name, key,
                  "not asked" if answer is None else (", ".join(answer) or "no one-kernel scheduler"))
        return answer

    def _ask(self, sub: GraphModule, vals: Sequence[Any]) -> Answer:
        from dynamo_nvf.lowering import build_fusion

        for meta in ((True, False) if SegmenterOracle._meta_inputs is None
                     else (SegmenterOracle._meta_inputs,)):
            args = _example_inputs(vals, meta)
            if args is None:
                return None
            try:
                fd = build_fusion(self._nvf, sub, args).fd
                found = self._nvf.schedule.find_compatible_schedulers(fd.fusion, list(args))
            except Exception as exc:  # noqa: BLE001
                log.debug("segmenter: question failed (%s inputs): %s", "meta" if meta else "CUDA", exc)
                continue
            SegmenterOracle._meta_inputs = meta
            return tuple(str(s).rsplit(".", 1)[-1] for s in found)
        return None


def _example_inputs(vals: Sequence[Any], meta: bool) -> Optional[list[Any]]:
    """Inputs with the traced values' sizes, strides and dtypes, or None where one cannot be made."""
    args: list[Any] = []
    total = 0
    for val in vals:
        if isinstance(val, torch.Tensor):
            try:
                sizes = [hint_int(s) for s in val.shape]
                strides = [hint_int(s) for s in val.stride()]
            except Exception:  # noqa: BLE001 - a size without a hint
                return None
            if val.device.type == "cpu":  # a CPU scalar
                args.append(torch.zeros(sizes, dtype=val.dtype))
                continue
            if val.device.type != "cuda":
                return None
            if not meta:
                total += (1 + sum((n - 1) * st for n, st in zip(sizes, strides) if n > 0)) * val.element_size()
                if total > _MAX_FREE_SHARE * torch.cuda.mem_get_info(val.device)[0]:
                    return None
            args.append(torch.empty_strided(sizes, strides, dtype=val.dtype, device="meta" if meta else val.device))
        elif isinstance(val, (bool, int, float)):
            args.append(val)
        elif isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
            args.append(hint_int(val) if isinstance(val, torch.SymInt) else val.node.hint)
        else:
            return None
    return args


def oracle_for(settings: Settings) -> Optional[SegmenterOracle]:
    """The oracle planning may ask under these settings, or None (off, planning a CPU machine's graph,
    no nvFuser or no GPU)."""
    if not settings.ask_segmenter or settings.plan_cpu_as_cuda:
        return None
    if not nvf_env.nvfuser_available() or not torch.cuda.is_available():
        return None
    try:
        return SegmenterOracle()
    except Exception as exc:  # noqa: BLE001
        log.debug("segmenter: no oracle: %s", exc)
        return None
