"""attnsim.hwmodels.dram."""
