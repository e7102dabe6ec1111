"""Backend registry: a name -> how to turn a plain callable into the thing we time.

Every backend is a black box to the suite: it only wraps a callable.  The nvf
backends import ``dynamo_nvf`` lazily (importing it registers the
``nvf_bookend`` torch.compile backend), so listing workloads or running the
eager / inductor columns never depends on that package being importable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Wrap = Callable[[Callable], Callable]

#: The backend the ratio columns are about, and the references it is divided by.
SUBJECT = "nvf_bookend"
REFERENCES = ("eager", "inductor", "nvf_untrimmed")


@dataclass(frozen=True)
class Backend:
    """One column of the report: ``wrap(fn)`` returns the callable to time."""

    name: str
    wrap: Wrap
    description: str
    compiled: bool = True  # False: no compile step, so no fresh compile for tiny inputs


def _eager(fn: Callable) -> Callable:
    return fn


def _inductor(fn: Callable) -> Callable:
    return torch.compile(fn)


def _dynamo_eager(fn: Callable) -> Callable:
    return torch.compile(fn, backend="eager")


def _inductor_ro(fn: Callable) -> Callable:
    return torch.compile(fn, mode="reduce-overhead")


def _nvf(options: dict | None) -> Wrap:
    def wrap(fn: Callable) -> Callable:
        import dynamo_nvf  # noqa: F401  (import registers the "nvf_bookend" backend)

        if options:
            return torch.compile(fn, backend="nvf_bookend", options=dict(options))
        return torch.compile(fn, backend="nvf_bookend")

    return wrap


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("eager", _eager, "plain PyTorch eager", compiled=False),
        Backend("inductor", _inductor, "torch.compile default (inductor)"),
        Backend("nvf_bookend", _nvf(None), "dynamo_nvf backend, bookend trimming on"),
        Backend(
            "nvf_untrimmed",
            _nvf({"bookend": False}),
            'dynamo_nvf backend with options={"bookend": False}',
        ),
        Backend(
            "nvf_trim_broadcasts",
            _nvf({"trim_broadcasts": True}),
            'dynamo_nvf with options={"trim_broadcasts": True}: evidence for the leading-expand rule; opt-in',
        ),
        Backend(
            "nvf_aten_embedding",
            _nvf({"fuse_embedding": False}),
            'dynamo_nvf with options={"fuse_embedding": False}: ATen\'s embedding, against the fused default; opt-in',
        ),
        Backend(
            "dynamo_eager",
            _dynamo_eager,
            'torch.compile(backend="eager"): Dynamo\'s own cost, the floor of any backend; opt-in',
        ),
        Backend(
            "inductor_ro",
            _inductor_ro,
            'torch.compile(mode="reduce-overhead") (CUDA graphs); only with --reduce-overhead',
        ),
    )
}

#: Backends a plain run uses; inductor_ro is opt-in (--reduce-overhead).
DEFAULT_BACKENDS: tuple[str, ...] = ("eager", "inductor", "nvf_bookend", "nvf_untrimmed")
OPTIONAL_BACKENDS: tuple[str, ...] = ("inductor_ro", "dynamo_eager", "nvf_trim_broadcasts")


def get_backend(name: str) -> Backend:
    """Look a backend up, with an error that lists the valid names."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


def reset_compile_state() -> None:
    """Drop dynamo caches so one backend's compiled graphs never serve another."""
    torch._dynamo.reset()
