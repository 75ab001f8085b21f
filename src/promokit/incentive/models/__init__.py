"""The joint-incentive paper's response heads (one per file) and the network that joins them to a representation."""
