# Freeze manifest for MicroPython firmware with the edgetwin core in flash (written by
# `python -m tools.board.freeze_manifest`; do not edit). Build from a MicroPython checkout, e.g.
#   make -C ports/rp2 BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest.py
include("$(PORT_DIR)/boards/manifest.py")

package("shared", files=(
    "__init__.py",
    "bpe.py",
    "cobs.py",
    "crc32.py",
    "irqlock.py",
    "drafter.py",
    "episode.py",
    "fixedmath.py",
    "frame.py",
    "kernels.py",
    "kvsnap.py",
    "link.py",
    "llama.py",
    "lruk.py",
    "mbf.py",
    "memfit.py",
    "memplan.py",
    "model_load.py",
    "plant.py",
    "plant_alarms.py",
    "plant_faults.py",
    "profile.py",
    "q4.py",
    "q4_viper.py",
    "q4a_q8.py",
    "ringkv.py",
    "ringkv_viper.py",
    "specdec.py",
    "unicats.py",
    "seqlock.py",
), base_path="..")
package("firmware", files=(
    "__init__.py",
    "annotator.py",
    "boardcfg.py",
    "bootonce.py",
    "uart.py",
    "logq.py",
    "node.py",
    "sampler.py",
    "selftest.py",
    "spill.py",
), base_path="..")
