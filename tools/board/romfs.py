"""ROMFS images whose files start word-aligned, for MicroPython's VfsRom (mounted at /rom on our rp2 build).

    python -m tools.board.romfs OUT.romfs FILE [FILE ...]     # each FILE at /rom/<its name>

mpremote's builder (`mpremote romfs build`, mpremote/romfs.py) writes each file's bytes right after its
variable-length record headers, so a file starts at whatever offset those headers leave. The node reads
the model's weights in place (shared/mbf.py `Reader.mem`): the viper kernels load 16- and 32-bit words
from them, and a Cortex-M0+ faults on an unaligned load, so the reader only uses a file in place when it
starts on a word (else it copies, as from littlefs). This builder puts a padding record (kind 1, which
VfsRom skips) before each file record so that the file's data starts on a multiple of ALIGN from the
image's start; the partition itself starts on a 4 KB flash sector. The record encoding is mpremote's
(VfsRomWriter: ROMFS header, varint kinds and lengths, DATA_VERBATIM payloads); flat images only (files
at the root), which is all a node needs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mpremote.romfs import VfsRomWriter

ALIGN = 32  # an MBF file's segments are 32-byte aligned within it: keep them so in flash
_LEN_WIDTH = 5  # the image length as a 5-byte varint (leading 0x80 bytes are zero digits): images < 32 GB


def _uint(value: int) -> bytes:
    return VfsRomWriter()._encode_uint(value)


def _record(kind: int, payload: bytes) -> bytes:
    return _uint(kind) + _uint(len(payload)) + payload


def _fixed_uint(value: int, width: int) -> bytes:
    enc = _uint(value)
    if len(enc) > width:
        raise ValueError("ROMFS image of %d bytes is too large" % value)
    return b"\x80" * (width - len(enc)) + enc


def build(files: dict[str, bytes], align: int = ALIGN) -> bytes:
    """The image holding files (name -> bytes, plain names) at its root, each file's data starting at a
    multiple of align from the image's first byte."""
    head_len = len(VfsRomWriter.ROMFS_HEADER) + _LEN_WIDTH
    body = bytearray()
    for name in sorted(files):
        if not name or "/" in name or not name.isascii():
            raise ValueError("ROMFS file name %r: a plain ASCII name, no folders" % name)
        data = bytes(files[name])
        enc_name = name.encode("ascii")
        inner = _uint(len(enc_name)) + enc_name + _uint(VfsRomWriter.ROMFS_RECORD_KIND_DATA_VERBATIM) \
            + _uint(len(data))
        payload_len = len(inner) + len(data)
        # where the data would start if the file record came next
        start = head_len + len(body) + len(_uint(VfsRomWriter.ROMFS_RECORD_KIND_FILE)) + len(_uint(payload_len)) \
            + len(inner)
        gap = -start % align
        if gap:
            if gap == 1:  # the smallest padding record is 2 bytes (kind, length 0)
                gap += align
            body += _record(VfsRomWriter.ROMFS_RECORD_KIND_PADDING, bytes(gap - 2))
        body += _record(VfsRomWriter.ROMFS_RECORD_KIND_FILE, inner + data)
    if (head_len + len(body)) % 2:  # an even image, as mpremote's finalise() makes it
        body += _record(VfsRomWriter.ROMFS_RECORD_KIND_PADDING, bytes(align - 1))
    image = VfsRomWriter.ROMFS_HEADER + _fixed_uint(len(body), _LEN_WIDTH) + bytes(body)
    for name, off in offsets(image).items():
        assert off % align == 0, (name, off)
    return image


def offsets(image: bytes) -> dict[str, int]:
    """name -> offset of its data in a flat ROMFS image (what VfsRom's memoryview of the file starts at)."""
    def uint(pos: int) -> tuple[int, int]:
        v = 0
        while True:
            b = image[pos]
            pos += 1
            v = (v << 7) | (b & 0x7F)
            if not b & 0x80:
                return v, pos

    if not image.startswith(VfsRomWriter.ROMFS_HEADER):
        raise ValueError("not a ROMFS image")
    length, pos = uint(len(VfsRomWriter.ROMFS_HEADER))
    end = pos + length
    out: dict[str, int] = {}
    while pos < end:
        kind, pos = uint(pos)
        n, pos = uint(pos)
        if kind == VfsRomWriter.ROMFS_RECORD_KIND_FILE:
            k, p = uint(pos)
            name = image[p:p + k].decode("ascii")
            dkind, p = uint(p + k)
            _dlen, p = uint(p)
            if dkind == VfsRomWriter.ROMFS_RECORD_KIND_DATA_VERBATIM:
                out[name] = p
        pos += n
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the image to write (deploy it with: mpremote romfs deploy OUT.romfs)")
    ap.add_argument("files", type=Path, nargs="+", help="files to put at /rom/<name>")
    args = ap.parse_args(argv)
    image = build({p.name: p.read_bytes() for p in args.files})
    args.out.write_bytes(image)
    print("%s: %d bytes, %d files, data %d-byte aligned" % (args.out, len(image), len(args.files), ALIGN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
