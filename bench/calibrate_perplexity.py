"""Measure the proxy-error -> perplexity mapping and save it (configs/calibration/kv_error_ppl.yaml).

This is the TOY entry (`toy-char-level`) of configs/calibration/kv_ppl_models.yaml: `attnsim plan` uses it for a
real model only as the (labelled) bit-error slope or with --allow-uncalibrated.

Trains the small numpy char-level transformer of attnsim.hwmodels.reliability.perplexity on the
stdlib pydoc_data.topics text (no downloads), corrupts its KV cache in each format at each BER
(inject.py, no ECC), and records perplexity and the proxy's relative attention error on the same
caches, then the fit log(1 + ppl_increase) = s_quant e_quant + s_bit e_bit. About 10 s on one core.

Run: OPENBLAS_NUM_THREADS=1 python bench/calibrate_perplexity.py [--out FILE]
(one BLAS thread: the matrices are tiny and a threaded BLAS on a busy machine is several times slower;
the results are the same either way.)

The same calibration on a larger model (not run here; needs torch + transformers and a model on disk):
    1. load e.g. AutoModelForCausalLM.from_pretrained(path) and a held-out text (wikitext-2 test split);
    2. per window, run the prompt with use_cache=True and take past_key_values (per layer K, V of shape
       (batch, kv_heads, tokens, head_dim));
    3. corrupt each with perplexity.corrupt_cache(K.numpy(), V.numpy(), fmt, ber, seed) and put them back
       (DynamicCache), then score the NEXT window's tokens against the corrupted cache (the cache is read,
       not recomputed) -- the clean run of the same windows gives the baseline perplexity;
    4. the proxy on the same caches: the attention outputs of each layer with clean vs corrupted K, V
       (output_attentions or a forward hook on the attention module), rel_attention_error(O, O2);
    5. feed the points to perplexity.fit_mapping and save them in this file's format (model: the model name).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "configs" / "calibration" / "kv_error_ppl.yaml"


def main(argv=None) -> int:
    import yaml

    from attnsim.hwmodels.reliability import perplexity as P

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT), help=f"YAML file to write (default {DEFAULT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    doc = P.calibrate()
    doc["fit"] = P.fit_mapping(doc["points"])
    doc["mean_points"] = P.mean_points(doc["points"])
    head = (
        "# Measured KV-error -> perplexity mapping (written by bench/calibrate_perplexity.py; do not edit).\n"
        "# points: per format, BER (per stored bit, no ECC) and seed; ppl_increase = ppl / ppl_clean - 1;\n"
        "# rel_attention_error: mean over windows, heads and query positions of min(||o'-o||/||o||, 1).\n"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(head + yaml.safe_dump(doc, sort_keys=False, width=120))
    f = doc["fit"]
    print(
        f"ppl clean {doc['ppl_clean']:.3f}, unigram {doc['ppl_unigram']:.3f}; fit s_quant {f['s_quant']:.4g}, "
        f"s_bit {f['s_bit']:.4g}, residual rms {f['residual_rms']:.3g} (log ppl); wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
