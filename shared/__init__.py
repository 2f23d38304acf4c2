# edgetwin portable core: MicroPython- and CPython-compatible modules shared by node and gateway.
