"""State between runs and owners: the checkpoint codec and its migrations, the checkpoint
stores (a directory, a changelog topic), and the replica ledger that keeps exported counters
monotonic."""
