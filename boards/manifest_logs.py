# Freeze manifest for MicroPython firmware with the edgetwin logs-only node in flash (written by
# `python -m tools.board.freeze_manifest`; do not edit). Build from a MicroPython checkout, e.g.
#   make -C ports/rp2 BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest_logs.py

include("$(PORT_DIR)/boards/manifest.py")

package("shared", files=(
    "__init__.py",
    "cobs.py",
    "compat.py",
    "crc32.py",
    "crc32_viper.py",
    "frame.py",
    "frame_codec.py",
    "irqlock.py",
    "linefmt.py",
    "link.py",
    "modbus_rtu.py",
    "plant.py",
    "plant_alarms.py",
    "plant_catalogue.py",
    "plant_engine.py",
    "plant_faults.py",
    "plantcfg.py",
    "profile.py",
    "profile_io.py",
    "readings.py",
    "scaling.py",
    "seqlock.py",
    "txwindow.py",
    "wallclock.py",
), base_path="..")
package("firmware", files=(
    "__init__.py",
    "ads1115.py",
    "analog.py",
    "boardcfg.py",
    "bootonce.py",
    "contacts.py",
    "i2c_sensors.py",
    "inputs.py",
    "logq.py",
    "mcp9600.py",
    "modbus.py",
    "node.py",
    "nodecfg.py",
    "pulses.py",
    "sampler.py",
    "spill.py",
    "uart.py",
), base_path="..")
