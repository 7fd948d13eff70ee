"""``searchmon run``: the consumer loop, the state process and the checkpoint coordinator."""
