# Freeze manifest for MicroPython firmware with the edgetwin drafting node in flash (written by
# `python -m tools.board.freeze_manifest`; do not edit). Build from a MicroPython checkout, e.g.
#   make -C ports/rp2 BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest.py
# The logs-only node (and the port's own modules):
include("manifest_logs.py")

package("shared", files=(
    "bpe.py",
    "drafter.py",
    "episode.py",
    "fixedmath.py",
    "kernels.py",
    "kvsnap.py",
    "llama.py",
    "llama_fused.py",
    "lruk.py",
    "mbf.py",
    "memfit.py",
    "memplan.py",
    "model_load.py",
    "q4.py",
    "q4_native.py",
    "q4_viper.py",
    "q4a_q8.py",
    "ringkv.py",
    "ringkv_viper.py",
    "specdec.py",
    "sptok.py",
    "unicats.py",
), base_path="..")
package("firmware", files=(
    "annotator.py",
    "codeslot.py",
    "episodes.py",
    "selftest.py",
    "update.py",
    "ustar.py",
), base_path="..")
