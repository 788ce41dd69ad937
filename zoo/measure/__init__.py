"""Measured once, used everywhere: FLOPs, device peaks, energy, throughput, the environment."""
