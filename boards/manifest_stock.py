# manifest_stock.py: the rp2 port's default manifest alone, as the official MicroPython download has it
# (no edgetwin code frozen): `make firmware-stock`, for measuring the node run from the filesystem's .mpy files.
include("$(PORT_DIR)/boards/manifest.py")
