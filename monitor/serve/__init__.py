"""What leaves the process: the HTTP transport and its routes, the metrics catalogue and
collector, the status page, and the query and replay reports."""
