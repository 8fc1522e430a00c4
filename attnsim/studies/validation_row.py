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
    tolerance: float  # relative error allowed ("relative" and "bracket" rows)
    # "relative": |measured / published - 1| <= tolerance; "upper_bound": measured <= published; "bracket": the true
    # value is known to lie in [published, published_high] (e.g. an MLPerf Server target that passed and the
    # Offline throughput above it): measured within tolerance of that interval
    check: str = "relative"
    role: str = "validation"  # or "calibration" (in-sample), "limit" (a physical bound), "headline" (not counted)
    system: str = ""  # the system (or GPU) the row is about
    source: str = ""  # where the reference number comes from, when the row names it
    note: str = ""  # what the row's reader must know (e.g. a stated condition attnsim cannot express)
    published_high: float | None = None  # the bracket's upper end ("bracket" rows)

    @property
    def error(self) -> float:
        """Relative error: to ``published``; for a bracket to its nearer end (0 inside)."""
        if not self.published:
            return float("nan")
        if self.check == "bracket" and self.published_high is not None:
            if self.measured > self.published_high:
                return self.measured / self.published_high - 1.0
            return min(0.0, self.measured / self.published - 1.0)
        return self.measured / self.published - 1.0

    @property
    def ok(self) -> bool:
        if self.check == "upper_bound":
            return bool(self.measured <= self.published * (1 + 1e-12))
        return bool(abs(self.error) <= self.tolerance + 1e-12)

    def as_dict(self) -> dict:
        return {**asdict(self), "error": self.error, "ok": self.ok}
