"""Domain model and pure transforms: no I/O, no clocks, safe to import from workflow code."""
