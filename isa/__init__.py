"""attnsim.isa."""
