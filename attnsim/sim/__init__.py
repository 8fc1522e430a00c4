"""Simulation of one run: experiment, runner, engine, pipeline, speculative decoding, timeline, results documents.
Imports core and the models (docs/architecture.md)."""
