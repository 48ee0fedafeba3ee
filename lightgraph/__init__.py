"""lightgraph."""
