"""attnsim.hwmodels.reliability: memory error models, ECC, bit-exact KV injection, the L0 accuracy
proxy and reliability-aware KV tiering (shared/reference/cxl_reliability.md §3-§5, issue 4)."""

from attnsim.hwmodels.reliability.ecc import SCHEMES, EccScheme, get_scheme  # noqa: F401
from attnsim.hwmodels.reliability.errors import RawErrorModel, refresh_power_scale  # noqa: F401
