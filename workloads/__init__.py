"""attnsim.workloads."""
