"""What more than one subject's benchmarks share: figures and meters, the noisy lines, the wire tap."""
