"""The domain: query classes, sessions and online counters, judged samples and their
windows, query lists, the pipeline that wires them, and the export read model. Pure: no I/O,
no clock."""
