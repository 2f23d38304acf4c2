"""Generated training and benchmark plants: machine kinds, naming schemes and units drawn from a seed into real
plant descriptions (docs/PLANT.md), a simulator that drives any of them, and Modbus slaves that serve it
(docs/TRAINING_PLANTS.md). Tools only: nothing in host/, firmware/ or shared/ imports this package.

    catalogue.py  the machine kinds: signals, alarm points, interlocks, faults and what each fault shows first
    units.py      metric and US units per measured quantity, and the conversions between them
    naming.py     naming schemes: machine ids, words and aliases, signal keys and tags
    split.py      which kinds and schemes are held out (the one place that says so)
    generate.py   description generator and its CLI (python -m tools.plants.generate)
    physics.py    the simulator of a generated description: states, noise, faults, alarms, ground truth
    serve.py      the simulator behind Modbus RTU slaves on a pty (tools/board/rig.py's machinery)
"""
