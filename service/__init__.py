"""What noderoll's long-running processes (`noderoll worker`, `noderoll bridge`) share below both:
the connection flags and settings and the start-up (`connection.py`), and the one Temporal client
helper that every process and the CLI use (`temporal_client.py`). Does I/O."""
