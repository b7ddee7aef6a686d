"""The duplex-es command line: serve, worker, db, replay, audit, demo."""
