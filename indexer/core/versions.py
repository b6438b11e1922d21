"""The bit layout of binlog versions, in one place: (file number, position, row in event)
packed into one positive signed long that grows with the commit order of one server's row
changes (:func:`indexer.core.documents.pack_binlog_version` packs it; version epochs,
:mod:`indexer.core.sources`, offset the file-number field)."""

from __future__ import annotations

#   bits 44..62  file number   (19 bits: up to 524287, the .NNNNNN suffix of the binlog file,
#                               plus the version epoch's offset)
#   bits 12..43  byte position (32 bits: binlog positions are 32-bit, files stay under 4 GiB)
#   bits  0..11  row in event  (12 bits: 4095 rows; every row takes at least 2 bytes of a rows
#                               event, and binlog_row_event_max_size defaults to 8 KiB)
FILE_BITS, POS_BITS, ROW_BITS = 19, 32, 12
MAX_FILE, MAX_POS, MAX_ROW = (1 << FILE_BITS) - 1, (1 << POS_BITS) - 1, (1 << ROW_BITS) - 1
# Elasticsearch versions are positive signed longs.
MAX_VERSION = (1 << 63) - 1


def pack(file_field: int, pos: int, row: int) -> int:
    return (file_field << (POS_BITS + ROW_BITS)) | (pos << ROW_BITS) | row


def unpack_binlog_version(version: int) -> tuple[int, int, int]:
    """(file-number field, position, row) of a binlog version."""
    return (version >> (POS_BITS + ROW_BITS), (version >> ROW_BITS) & MAX_POS, version & MAX_ROW)
