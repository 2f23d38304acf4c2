# edgetwin's RPI_PICO with a ROMFS partition (mpconfigboard.h); otherwise the port's boards/RPI_PICO.
set(PICO_BOARD "pico")
set(PICO_PLATFORM "rp2040")
set(MICROPY_BOARD_PINS "${MICROPY_PORT_DIR}/boards/RPI_PICO/pins.csv")
