"""The records of an offline W&B run file (`run-<id>.wandb`), read without W&B's own reader, which W&B 0.19+
no longer ships in Python (LeRobot 0.6's stack has wandb 0.31; LeRobot 0.4.4's has 0.24).

The file is a LevelDB-style log: a 7-byte file header (`:W&B`, a 2-byte magic, a version byte), then 32 KiB
blocks of chunks, each with a 7-byte header (little-endian crc32 of its type byte and data, 2-byte length, 1-byte
type: 1 whole record, 2 first, 3 middle, 4 last chunk of a record). A block's last bytes, too few for a chunk
header, are padding.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

BLOCK = 32768
HEADER = 7
WHOLE, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[bytes]:
    """Each serialized record of the file, in order (checksums verified)."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    index, pending = HEADER, b""
    while True:
        if BLOCK - index % BLOCK < HEADER:
            index += BLOCK - index % BLOCK  # padding at the end of a block
        if index + HEADER > len(data):
            return
        checksum, length, kind = struct.unpack("<IHB", data[index : index + HEADER])
        chunk = data[index + HEADER : index + HEADER + length]
        index += HEADER + length
        if kind == 0 and length == 0:
            return  # zero-filled tail
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            raise ValueError(f"{path}: bad checksum at byte {index - HEADER - length}")
        if kind == WHOLE:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""
        else:
            raise ValueError(f"{path}: unknown chunk type {kind}")
