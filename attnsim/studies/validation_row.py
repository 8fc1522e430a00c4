"""One row of ``attnsim validate``: attnsim's number vs a reference, its tolerance and role. Its own module so
that the row producers (attnsim.studies.validate's sets, attnsim.studies.reproduce's folders) share it without importing
each other (attnsim.studies.validate.Row is its public name)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Row:
    set: str
    name: str
    measured: float
    published: float
    tolerance: float  # relative error allowed ("relative" rows)
    check: str = "relative"  # or "upper_bound": measured <= published
    role: str = "validation"  # or "calibration" (in-sample) or "limit" (a physical bound)
    system: str = ""  # the system (or GPU) the row is about
    source: str = ""  # where the reference number comes from, when the row names it
    note: str = ""  # what the row's reader must know (e.g. a stated condition attnsim cannot express)

    @property
    def error(self) -> float:
        return self.measured / self.published - 1.0 if self.published else float("nan")

    @property
    def ok(self) -> bool:
        if self.check == "upper_bound":
            return bool(self.measured <= self.published * (1 + 1e-12))
        return bool(abs(self.error) <= self.tolerance + 1e-12)

    def as_dict(self) -> dict:
        return {**asdict(self), "error": self.error, "ok": self.ok}
