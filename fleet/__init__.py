"""A node's life before training starts: its boot scripts, network environment, rendezvous and agent bundle."""
