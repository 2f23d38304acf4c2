// edgetwin's RPI_PICO (make firmware, tools/board/firmware_build.py): the stock board with a ROMFS partition
// for the draft model, read in place from flash (docs/BOARDS.md, "Flash layout"). The 2 MB flash:
//   0x000000  640 KB  firmware (code, the node frozen)
//   0x0a0000  384 KB  ROMFS, mounted at /rom (the model; mpremote romfs / edgetwin deploy write it)
//   0x100000 1024 KB  littlefs filesystem at / (board.json, node.json, the spill ring, an overriding model)
// The stock download (make firmware-stock) has no ROMFS: its filesystem is the last 1408 KB.
// boards/rp2040_pico.json: fs_bytes and romfs_bytes say the same; keep them in step.
#define MICROPY_HW_BOARD_NAME                   "Raspberry Pi Pico"
#define MICROPY_HW_FLASH_STORAGE_BYTES          (1024 * 1024)
#define MICROPY_HW_ROMFS_BYTES                  (384 * 1024)
