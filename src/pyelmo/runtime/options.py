"""How one ``BiLM.forward`` call runs: the run options, owned by whoever runs the model.

:class:`RunOptions` holds the execution plan (``None``: the model's own differentiable modules) and its
products (what the planned modules swapped in by :func:`pyelmo.runtime.planning.plan_model` share), the
token cache and, in stateful mode, the carried LSTM states. ``ElmoEmbedder`` and ``Elmo`` own one each;
nothing writes settings onto a model it was handed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import DEFAULT, Quantization
from pyelmo.runtime.products import Products
from pyelmo.runtime.token_cache import TokenCache


class CarriedStates:
    """Stateful mode: the LSTM states ``(h (2, L, rows, P), c (2, L, rows, H))`` each batch row
    reached in the previous call; a smaller batch continues its rows and keeps the others."""

    def __init__(self) -> None:
        self.h: torch.Tensor | None = None
        self.c: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the carried states: the next call starts from zeros."""
        self.h = self.c = None

    def fill(self, h: torch.Tensor, c: torch.Tensor) -> None:
        """Write the carried states into the first rows of the zero states ``h``, ``c``."""
        if self.h is not None:
            rows = min(h.shape[2], self.h.shape[2])
            h[:, :, :rows] = self.h[:, :, :rows]
            c[:, :, :rows] = self.c[:, :, :rows]

    def update(self, h: torch.Tensor, c: torch.Tensor) -> None:
        """Carry the final states ``h``, ``c`` of a call (and the earlier rows it did not reach)."""
        h, c = h.detach(), c.detach()
        if self.h is not None and self.h.shape[2] > h.shape[2]:
            h = torch.cat([h, self.h[:, :, h.shape[2]:]], dim=2)
            c = torch.cat([c, self.c[:, :, c.shape[2]:]], dim=2)
        self.h, self.c = h, c


@dataclass
class RunOptions:
    """How one ``BiLM.forward`` call runs; the default runs the model's own modules, stateless.

    ``plan``: the execution plan of the inference products (``None``: differentiable); ``token_cache``: token
    vectors kept across calls (inference only); ``states``: carried LSTM states (stateful mode) or ``None``
    (every sentence starts from zeros). :attr:`products`: the plan's choices, shared by the modules
    :func:`pyelmo.runtime.planning.plan_model` swaps into a model for these options.
    """

    plan: ExecutionPlan | None = None
    token_cache: TokenCache | None = None
    states: CarriedStates | None = None
    products: Products | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.plan is None and self.token_cache is not None:
            raise ValueError("a token cache goes with an execution plan (inference): RunOptions.inference(...)")
        self.products = Products(self.plan) if self.plan is not None else None

    @classmethod
    def inference(cls, plan: ExecutionPlan | None = None, *, stateful: bool = False, token_cache_size: int = 0,
                  kernels: str | None = None, device: str | torch.device = "cpu",
                  precision: str | None = None, quantization: Quantization | None = None,
                  steps: str | None = None, products: Products | None = None) -> RunOptions:
        """The inference options of ``plan`` (default: :meth:`ExecutionPlan.for_machine` of ``precision``
        (a name of :mod:`pyelmo.runtime.precision`: ``float32``, ``bfloat16``, ``int8``), ``quantization``,
        ``kernels`` and ``steps``). ``products``: those of a model planned already, to run it with (their plan)."""
        plan = products.plan if products is not None else plan or ExecutionPlan.for_machine(
            kernels=kernels, device=device, precision=precision, quantization=quantization, steps=steps)
        options = cls(plan, TokenCache(token_cache_size) if token_cache_size > 0 else None,
                      CarriedStates() if stateful else None)
        options.products = products or options.products
        return options

    @property
    def differentiable(self) -> bool:
        return self.plan is None

    @property
    def stateful(self) -> bool:
        return self.states is not None

    @property
    def dtype(self) -> torch.dtype:
        """The products' input precision (float32 in int8 mode: the activations are quantized inside the products)."""
        return (self.products.dtype if self.products is not None else None) or torch.float32

    @property
    def precision(self) -> str:
        """The precision's one spelling, as output files record it (``float32`` for differentiable products)."""
        return DEFAULT.name if self.plan is None else self.plan.precision
