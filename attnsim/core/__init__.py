"""Core layer: config schemas + loading, errors, file I/O, caches, fingerprints, notices, formatting. Imports nothing of
attnsim above it (docs/architecture.md)."""
