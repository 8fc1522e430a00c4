"""attnsim.hwmodels."""
