"""attnsim.studies.serve: request-level serving simulation (issue 7).

Request traces (requests.py) -> iteration-level continuous batching (scheduler.py) whose
iterations are costed by the device models through the mapper and ``engine.cost_step``
(costing.py, memoised) -> per-request and aggregate metrics (metrics.py). Technique
families: paged KV (paging.py), prefix caching (prefix.py), KV eviction / selection
budgets (kvpolicy.py), prefill/decode disaggregation (disagg.py). Entry point:
``attnsim serve`` (attnsim/cli/serve.py) and :func:`attnsim.studies.serve.run.serve_experiment`.
"""
