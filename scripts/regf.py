#!/usr/bin/env python3
"""Writes an empty Windows registry hive: a root key with no values and no subkeys.

    scripts/regf.py OUT NAME [FILETIME]

Why: a Windows container image's first layer is a base layer, and when containerd's Windows
snapshotter imports one it has Windows process it (ProcessBaseLayer), which requires the hives
Files/Windows/System32/config/{DEFAULT,SAM,SECURITY,SOFTWARE,SYSTEM}; since Windows Server 2025
they must load as real hives, not empty files. A HostProcess container runs on the host and never
reads them, so empty hives are all the image needs (scripts/images.sh).

The layout follows the documented "regf" format (version 1.3): a 4 KiB base block, then one 4 KiB
hive bin holding the root key ("nk" cell), its security descriptor ("sk" cell) and one free cell.
Offsets in cells are relative to the first hive bin. FILETIME (100 ns since 1601, default 0)
dates the base block, bin and key, so the output depends on its arguments only.
"""

import struct
import sys

BLOCK = 4096
HBIN_HEADER = 32


def sid(authority, *subs):
    """A binary SID: revision 1, the sub-authority count, the 48-bit authority, the subs."""
    return struct.pack("<BB", 1, len(subs)) + authority.to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)


SYSTEM = sid(5, 18)  # S-1-5-18, LocalSystem
ADMINS = sid(5, 32, 544)  # S-1-5-32-544, BUILTIN\Administrators
KEY_ALL_ACCESS = 0xF003F
CONTAINER_INHERIT_ACE = 0x02


def security_descriptor():
    """Self-relative: owner Administrators, group SYSTEM, a DACL giving both full control."""
    aces = b""
    for who in (SYSTEM, ADMINS):
        body = struct.pack("<I", KEY_ALL_ACCESS) + who
        # ACCESS_ALLOWED_ACE: type 0, flags, size, mask, SID.
        aces += struct.pack("<BBH", 0, CONTAINER_INHERIT_ACE, 4 + len(body)) + body
    dacl = struct.pack("<BBHHH", 2, 0, 8 + len(aces), 2, 0) + aces  # ACL revision 2, two ACEs
    header = 20
    owner_at = header
    group_at = owner_at + len(ADMINS)
    dacl_at = group_at + len(SYSTEM)
    control = 0x8000 | 0x0004  # SE_SELF_RELATIVE | SE_DACL_PRESENT
    return struct.pack("<BBHIIII", 1, 0, control, owner_at, group_at, 0, dacl_at) + ADMINS + SYSTEM + dacl


def cell(payload):
    """An allocated cell: a negative size (including the 4-byte size itself), 8-byte aligned."""
    size = (4 + len(payload) + 7) // 8 * 8
    return struct.pack("<i", -size) + payload + b"\0" * (size - 4 - len(payload))


def hive(name, filetime=0):
    key_name = name.encode("ascii")
    nk_at = HBIN_HEADER
    nk_len = len(cell(b"\0" * (76 + len(key_name))))
    sk_at = nk_at + nk_len
    none = 0xFFFFFFFF
    nk = struct.pack(
        "<2sHQIIIIIIIIIIIIIIIHH",
        b"nk",
        0x2C,  # KEY_HIVE_ENTRY | KEY_NO_DELETE | KEY_COMP_NAME (an ASCII name)
        filetime,
        0,  # access bits
        0,  # parent: none for the root
        0, 0,  # subkeys, volatile subkeys
        none, none,  # their lists
        0, none,  # values and their list
        sk_at,  # security
        none,  # class name
        0, 0, 0, 0,  # largest subkey name, class name, value name, value data
        0,  # work var
        len(key_name),
        0,  # class name length
    ) + key_name
    sd = security_descriptor()
    # One sk cell is a ring of one: forward and back links point at itself; one key uses it.
    sk = struct.pack("<2sHIIII", b"sk", 0, sk_at, sk_at, 1, len(sd)) + sd
    cells = cell(nk) + cell(sk)
    assert len(cells) == nk_len + len(cell(sk))
    free = BLOCK - HBIN_HEADER - len(cells)
    cells += struct.pack("<i", free) + b"\0" * (free - 4)  # a free cell: positive size
    hbin = struct.pack("<4sIIQQI", b"hbin", 0, BLOCK, 0, filetime, 0) + cells
    assert len(hbin) == BLOCK

    base = bytearray(BLOCK)
    struct.pack_into(
        "<4sIIQIIIIIII",
        base,
        0,
        b"regf",
        1, 1,  # primary and secondary sequence numbers: equal means the hive is consistent
        filetime,
        1, 3,  # format version 1.3
        0,  # primary file
        1,  # direct memory load
        nk_at,  # root cell
        BLOCK,  # size of the hive bins
        1,  # clustering factor
    )
    file_name = name.encode("utf-16-le")[:64]
    base[48 : 48 + len(file_name)] = file_name
    checksum = 0
    for (word,) in struct.iter_unpack("<I", bytes(base[:508])):
        checksum ^= word
    checksum = {0: 1, 0xFFFFFFFF: 0xFFFFFFFE}.get(checksum, checksum)
    struct.pack_into("<I", base, 508, checksum)
    return bytes(base) + hbin


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    out, name = argv[1], argv[2]
    filetime = int(argv[3]) if len(argv) == 4 else 0
    with open(out, "wb") as f:
        f.write(hive(name, filetime))


if __name__ == "__main__":
    main(sys.argv)
