"""Workers: separate processes that claim ticks, run an engine and append its outputs."""
