"""Display labels: the names a figure prints for systems, ops, devices and components.

Results name things by their config keys (``dgx_h100``, ``attn_score``, ``dram_read_write``); a paper
prints "DGX H100", "QK^T", "DRAM read/write". :data:`DEFAULT_LABELS` holds the built-in names; a user
mapping (``labels:`` in a sweep file's figure, ``attnsim plot --labels FILE.yaml``) overrides or adds
entries. Names with no entry are printed as stored. :func:`active` applies a mapping while a figure is
drawn; recipes print every name through :func:`display`.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional

from attnsim.core.config import ConfigError

# the op classes of every figure, in legend order (attnsim.plots.style gives each one colour and marker)
OP_CLASSES = ("matmul", "attn_score", "attn_context", "softmax", "elementwise", "allreduce", "embedding", "transfer")
# column name -> (label, unit) ; unit None = dimensionless
KNOWN = {
    "ttft_s": ("TTFT", "s"),
    "tpot_s": ("TPOT", "s"),
    "total_time_s": ("Total time", "s"),
    "prefill_time_s": ("Prefill time", "s"),
    "decode_time_s": ("Decode time", "s"),
    "tokens_per_s": ("Throughput", "tokens/s"),
    "decode_tokens_per_s": ("Decode throughput", "tokens/s"),
    "energy_per_token_j": ("Energy per token", "J"),
    "decode_energy_per_token_j": ("Decode energy per token", "J"),
    "dynamic_energy_per_token_j": ("Dynamic energy per token", "J"),
    "decode_dynamic_energy_per_token_j": ("Decode dynamic energy per token", "J"),
    "static_energy_per_token_j": ("Static energy per token", "J"),
    "batch_size": ("Batch size", None),
    "prompt_len": ("Context length", "tokens"),
    "output_len": ("Output length", "tokens"),
    "elapsed_s": ("Simulation time", "s"),
    "rel_attention_error": ("Relative attention error", None),  # attnsim plan's accuracy proxy
    "rate_per_s": ("Arrival rate", "requests/s"),  # serving.trace.rate_per_s (attnsim.studies.serve)
}


SYSTEMS = {
    "h100_x1": "1\u00d7 H100",
    "dgx_a100": "DGX A100",
    "dgx_a100_x2": "2\u00d7 DGX A100",
    "dgx_h100": "DGX H100",
    "dgx_h200": "DGX H200",
    "dgx_h100_host": "DGX H100 + host",
    "a100_hbm3_x8": "8\u00d7 A100 (HBM3)",
    "a100_hbm3_x16_tp16": "16\u00d7 A100 (HBM3, TP16)",
    "a100_hbm3_x16_2rep": "16\u00d7 A100 (HBM3, 2 replicas)",
    "attacc": "AttAcc",
    "attacc_h100": "AttAcc (H100)",
    "attacc_h200": "AttAcc (H200)",
    "attacc_opt": "AttAcc (opt.)",
    "tiered_attacc": "Tiered AttAcc",
    "neupims": "NeuPIMs",
    "neupims_sb_off": "NeuPIMs (no sub-batch)",
    "neupims_naive": "NPU + PIM (naive)",
    "neupims_npu_only": "NeuPIMs NPU only",
    "cxl_pnm": "CXL-PNM",
    "cxl_pnm_host": "CXL-PNM + host",
    "cxl_aim": "CXL-AiM",
    "offload_host": "Host offload",
    "cent_pp1_tp8": "CENT (PP1, TP8)",
    "cent_pp2_tp4": "CENT (PP2, TP4)",
    "cent_pp4_tp2": "CENT (PP4, TP2)",
    "cent_pp8_tp1": "CENT (PP8, TP1)",
    "cent_pp32_tp1": "CENT (PP32, TP1)",
    "ianus": "IANUS",
    "ianus_a100": "IANUS (A100)",
    "ianus_a100_eager": "IANUS (A100, eager)",
    "ianus_naive": "IANUS (naive)",
    "ianus_npu_only": "IANUS (NPU only)",
    "cxl_ndp": "CXL-NDP",
}
OPS = {  # op names of the decode/prefill traces (time_s_by_op) and op classes (roofline)
    "qkv_proj": "QKV proj.",
    "attn_score": "QK$^\\mathsf{T}$",
    "attn_context": "SV",
    "softmax": "Softmax",
    "out_proj": "Out proj.",
    "mlp_up": "FFN up",
    "mlp_down": "FFN down",
    "mlp_act": "FFN act.",
    "lm_head": "LM head",
    "embedding": "Embedding",
    "rope": "RoPE",
    "attn_norm": "Attn. norm",
    "ffn_norm": "FFN norm",
    "final_norm": "Final norm",
    "attn_residual": "Attn. residual",
    "ffn_residual": "FFN residual",
    "attn_allreduce": "Attn. all-reduce",
    "mlp_allreduce": "FFN all-reduce",
    "pim_send_q_kv": "Send Q/KV to PIM",
    "pim_recv_out": "Receive from PIM",
    "pim_write_kv": "Write KV to PIM",
    "matmul": "GEMM/GEMV",
    "elementwise": "Element-wise",
    "allreduce": "All-reduce",
    "transfer": "Transfer",
}
COMPONENTS = {  # energy_j_by_component, time_s_by_device, static_energy_j_by_device
    "dram_activate": "DRAM activate",
    "dram_read_write": "DRAM read/write",
    "dram_io": "DRAM I/O",
    "dram_background": "DRAM background",
    "dram_refresh": "DRAM refresh",
    "pim_compute": "PIM compute",
    "compute": "Compute",
    "sram": "SRAM",
    "link": "Links",
    "ecc": "ECC",
    "static": "Static",
    "active": "Active",
    "gpu": "GPU",
    "npu": "NPU",
    "pim": "PIM",
    "pnm": "PNM",
    "host": "Host",
    "cpu": "CPU",
    "link:gpu_pim": "GPU\u2013PIM link",
    "link:nvlink": "NVLink",
    "link:cxl": "CXL link",
    "link:pcie": "PCIe",
}
DEFAULT_LABELS = {**SYSTEMS, **OPS, **COMPONENTS, "other": "Other"}  # "other": the summed small segments

_ACTIVE: ContextVar[dict] = ContextVar("attnsim_plot_labels", default=DEFAULT_LABELS)


def display(name) -> str:
    """The display label of ``name`` (a system, op, device or component), else ``name`` itself."""
    s = str(name)
    labels = _ACTIVE.get()
    if s in labels:
        return labels[s]
    if ": " in s:  # composite segment names ("static: gpu")
        head, tail = s.split(": ", 1)
        return f"{labels.get(head, head)}: {labels.get(tail, tail)}"
    return s


@contextmanager
def active(user: Optional[dict] = None):
    """Use the defaults overridden by ``user`` while drawing."""
    token = _ACTIVE.set({**DEFAULT_LABELS, **(user or {})})
    try:
        yield
    finally:
        _ACTIVE.reset(token)


UNIT_PREFIX = "unit."  # ``unit.<column>: ms``: the unit an axis shows that column in


def user_labels() -> dict:
    """The mapping in use while a figure is drawn (defaults overridden by the user's)."""
    return _ACTIVE.get()


def check_labels(obj, file: Optional[str], key: str = "labels", known=None) -> dict:
    """``obj`` as a {name: label} mapping of strings, or a ConfigError at ``key``. ``known``: the keys a
    figure can use (:func:`known_keys`); any other key is refused with the closest known one."""
    if not isinstance(obj, dict):
        raise ConfigError(
            f"expected a mapping of names to display labels, got {type(obj).__name__}", file=file, key=key
        )
    for k, v in obj.items():
        if not isinstance(v, (str, int, float)) or isinstance(v, bool) or str(v) == "":
            raise ConfigError(f"expected a non-empty text, got {v!r}", file=file, key=f"{key}.{k}")
        if known is not None and str(k) not in known:
            from attnsim.core.suggest import did_you_mean

            raise ConfigError(
                f"expected a name the figure draws (a system, model, op, component, device, swept "
                f"value or column; {UNIT_PREFIX}<column> for a unit), got {str(k)!r}"
                f"{did_you_mean(str(k), known)}",
                file=file,
                key=f"{key}.{k}",
            )
    return {str(k): str(v) for k, v in obj.items()}


def known_keys(table=None) -> set[str]:
    """Every label key a figure of ``table`` can use: the built-in names, op classes, axis columns (the
    stored and the unit-suffixed names, ``unit.<column>`` too), the names in its text columns and breakdowns."""
    from attnsim.studies.sweep.table import unit_name

    keys = set(DEFAULT_LABELS) | set(OP_CLASSES) | set(KNOWN)
    cols = set(KNOWN)
    if table is not None:
        for name, col in table.columns.items():
            cols |= {name, unit_name(name), name.split(".")[-1]}
            if getattr(col, "dtype", None) is not None and col.dtype.kind == "O":
                keys |= {str(v) for v in col.tolist()[:100_000]}
        for name in table.breakdown:
            cols.add(name)
            keys.add(name.rsplit("/", 1)[-1])
    return keys | cols | {UNIT_PREFIX + c for c in cols}


def load_labels(path) -> dict:
    """A ``--labels`` YAML file: one ``name: label`` per line."""
    from pathlib import Path

    from attnsim.core.config import parse_yaml, read_text_file

    p = Path(path)
    try:
        text = read_text_file(p, file=str(p), kind="document")  # a regular file within the size limit
    except ConfigError as exc:
        raise ConfigError(exc.message, file=str(p), key="--labels") from None
    return check_labels(parse_yaml(text, file=str(p)) or {}, file=str(p), key="--labels")
