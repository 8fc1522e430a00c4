"""Size limits on configs, checked by the schemas before anything is allocated or looped over.

Each limit is far above any real model or workload, and low enough that the arrays and loops it
bounds stay small (int64 per-request arrays: 8 bytes x the limit). A value beyond one is refused as
``<file>: <key>: expected a value <= <limit>, got <value>``.
"""

from __future__ import annotations

#: Layers of one model. The deepest published decoder LLMs have ~126 layers (Llama-3.1-405B: 126,
#: PaLM-540B: 118); the trace builder and layer patterns loop over layers.
MAX_LAYERS = 4096

#: Requests in one static batch (``batch_size``, ``context_lens`` entries): per-request length arrays
#: and decode traces are O(batch); 2^20 is ~1,000x the largest batches served on one system.
MAX_BATCH = 1 << 20

#: Tokens of one sequence (prompt, output, ``max_position_embeddings``, length-distribution
#: parameters): 2^24 = 16.8 M, above the longest published context window (10 M, Llama 4 Scout).
#: Also keeps every token count, and products of it with a batch, exact in int64 and float64.
MAX_TOKENS = 1 << 24

#: Decode steps simulated one by one (``generation.mode: exact``: one step per output token); beyond
#: this, ``mode: sampled`` integrates a few steps instead. Measured: ~1 ms per step on gpu_only and
#: ~10 ms on attacc (Llama-2-70B, batch 16), so 2^16 exact steps take 1-11 minutes.
MAX_EXACT_DECODE_STEPS = 1 << 16

#: Requests of one serving trace (synthetic ``num_requests`` or rows of a trace file): the scheduler
#: simulates every request's iterations, and per-request columns are O(requests).
MAX_REQUESTS = 1 << 20
