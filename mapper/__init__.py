"""attnsim.mapper."""
