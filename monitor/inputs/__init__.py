"""Inputs: the event model and the decoders that turn bytes into events (native JSON, UBI),
event files (plain, gzip, ``_bulk``), the Kafka source and the traffic generator."""
