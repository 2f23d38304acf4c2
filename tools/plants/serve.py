"""A generated plant's simulator (physics.Sim) behind Modbus RTU slaves, the way tools/board/rig.py serves the
built-in simulator: one pymodbus slave per device on the bus's pty, each register encoded as its profile says,
running and tripped as the machine's PLC state. Only where the values come from differs (rig.Rig's seam).

    sim = physics.Sim(desc, seed=3)
    rig = serve.SimRig(desc, sim, bus_port=node.bus_port(1)).start()   # steps the simulator once a second
    ...; rig.stop(); rig.lines                                          # the simulator's own event lines
"""

from __future__ import annotations

from tools.board import rig
from tools.plants import physics


class SimRig(rig.Rig):
    """rig.Rig over a physics.Sim: the description's machines are the simulator's, by id."""

    plant: physics.Sim

    def _map_machines(self) -> dict[str, str]:
        return {m["id"]: m["id"] for m in self.desc["machines"]}

    def _snapshot(self) -> None:
        for m in self.desc["machines"]:
            self._state[m["id"]] = self.plant.state(m["id"])
            for sig in m["signals"]:
                self._values[(m["id"], sig["key"])] = self.plant.value(m["id"], sig["key"])

    def _advance(self) -> list[tuple[int, str]]:
        # the machines' start-up lines are the simulator's before its first step (tick 0)
        first = [(0, ln) for ln in self.plant.lines] if self.plant.tick == 0 else []
        self.plant.step()
        return first + [(self.plant.tick, ln) for ln in self.plant.lines]
