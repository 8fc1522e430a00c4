"""attnsim: cycle-approximate simulator of LLM inference on memory-centric hardware."""
__version__ = "0.1.0"
