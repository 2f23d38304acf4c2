"""edgetwin gateway and host tools (CPython)."""
