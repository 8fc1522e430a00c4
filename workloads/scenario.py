"""Scenario: what is being served in one run (batch, lengths, dtypes)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

import numpy as np
from pydantic import Discriminator, Field, PositiveInt, Tag, ValidationInfo, field_validator, model_validator

from attnsim.config import Schema
from attnsim.workloads.model import DType


class LengthDistribution(Schema):
    """A named, seeded distribution of per-request prompt (context) lengths."""

    dist: Literal["fixed", "uniform", "normal", "lognormal"]
    mean: Optional[float] = Field(None, gt=0)
    std: Optional[float] = Field(None, ge=0)
    low: Optional[PositiveInt] = None
    high: Optional[PositiveInt] = None
    seed: int = 0

    @model_validator(mode="after")
    def _params(self):
        need = {"fixed": ("mean",), "uniform": ("low", "high"), "normal": ("mean", "std"), "lognormal": ("mean", "std")}
        missing = [k for k in need[self.dist] if getattr(self, k) is None]
        if missing:
            raise ValueError(f"distribution '{self.dist}' needs {', '.join(missing)}")
        if self.dist == "uniform" and self.low > self.high:
            raise ValueError(f"low ({self.low}) exceeds high ({self.high})")
        return self


def _lens_kind(v) -> str:
    return "function-list" if isinstance(v, list) else "function-distribution"


# A list or a distribution, chosen by the input's type so that errors come from that branch only.
# The tags start with "function-", which attnsim.config drops from error key paths.
LengthsSpec = Annotated[
    Union[Annotated[list[PositiveInt], Tag("function-list")],
          Annotated[LengthDistribution, Tag("function-distribution")]],
    Discriminator(_lens_kind)]


class Scenario(Schema):
    """Batch, lengths and storage formats of one run.

    Per-request prompt lengths come from ``context_lens`` (a list of length
    ``batch_size``, or a distribution) or, if absent, ``prompt_len`` for all.
    """

    name: str = "scenario"
    batch_size: PositiveInt = 1
    prompt_len: PositiveInt = 2048
    context_lens: Optional[LengthsSpec] = None
    output_len: PositiveInt = 128
    kv_dtype: DType = "fp16"
    weight_dtype: DType = "fp16"
    act_dtype: DType = "fp16"
    reliability: Optional[dict] = None  # overrides merged onto the experiment's reliability section

    @field_validator("context_lens")
    @classmethod
    def _lens(cls, v, info: ValidationInfo):  # a field validator so the error names `context_lens`
        b = info.data.get("batch_size")
        if isinstance(v, list) and b is not None and len(v) != b:
            raise ValueError(f"context_lens has {len(v)} entries, expected batch_size = {b}")
        return v

    def prompt_lens(self) -> np.ndarray:
        """Per-request prompt lengths (int64, length batch_size), deterministic for a seed."""
        n = self.batch_size
        c = self.context_lens
        if c is None:
            return np.full(n, self.prompt_len, dtype=np.int64)
        if isinstance(c, list):
            return np.asarray(c, dtype=np.int64)
        rng = np.random.default_rng(c.seed)
        if c.dist == "fixed":
            x = np.full(n, c.mean)
        elif c.dist == "uniform":
            x = rng.integers(c.low, c.high + 1, size=n)
        elif c.dist == "normal":
            x = rng.normal(c.mean, c.std, size=n)
        else:  # lognormal with the given arithmetic mean and std
            var = c.std ** 2
            sigma2 = np.log1p(var / c.mean ** 2)
            mu = np.log(c.mean) - sigma2 / 2
            x = rng.lognormal(mu, np.sqrt(sigma2), size=n)
        x = np.rint(x).astype(np.int64)
        lo = c.low or 1
        hi = c.high or np.iinfo(np.int64).max
        return np.clip(x, lo, hi)
