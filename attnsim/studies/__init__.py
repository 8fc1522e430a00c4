"""Studies built on runs: serve, sweep, plan, sensitivity and verdict flips, validation and reproductions. Imports core,
the models and sim (docs/architecture.md)."""
