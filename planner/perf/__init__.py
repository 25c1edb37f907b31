"""Performance models: compute (per device), transfer (across devices), comm (all-reduce)."""
