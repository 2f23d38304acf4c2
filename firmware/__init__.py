# edgetwin node firmware (MicroPython / CircuitPython).
