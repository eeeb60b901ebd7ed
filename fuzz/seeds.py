#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*.

Seeds are made here rather than checked in: the binary ones (GPT images, superblocks, IOCTL
answers) need CRCs and exact offsets, which code states more plainly than hex dumps. Each seed
is a well-formed input in the target's own input format (see the target's header comment), so
that the fuzzer starts from inputs that pass the parsers' checks and mutates from there.
Existing seed files are overwritten; whatever libFuzzer added to the corpus is kept.
"""
import os
import struct
import sys
import zlib

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def save(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def guid(text):
    """GPT / in-memory byte order: the first three groups little-endian."""
    h = bytes.fromhex(text.replace("-", ""))
    return h[3::-1] + h[5:3:-1] + h[7:5:-1] + h[8:]


LINUX_FS = guid("0fc63daf-8483-4772-8e79-3d69d8477de4")
MS_RESERVED = guid("e3c9e316-0b5c-4db8-817d-f92df00215ae")
BASIC_DATA = guid("ebd0a0a2-b9e5-4433-87c0-68b6b72699c7")


def paths():
    for i, p in enumerate([
        r"C:\var\lib\kubelet\pods\x", r"c:\VAR\lib\\kubelet\\", r"C:\a\CON.txt", r"C:\a\b:stream",
        r"C:\a\..\b", "C:/x", r"C:\a\kubelet. ", r"\\server\share\x", r"\\?\C:\var\lib\kubelet",
        r"\\?\UNC\srv\share\d", r"\??\C:\x", r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\a",
        "C:\\a\\x\uff0f..\uff0fy", "C:\\a\\COM\u00b9", "/var/lib/kubelet/pods/./x", "/a/../b", "//a//b/",
    ]):
        save("paths", str(i), p)


def smbios():
    def structure(kind, handle, body, strings):
        s = bytes([kind, 4 + len(body)]) + struct.pack("<H", handle) + body
        return s + (b"".join(x + b"\0" for x in strings) + b"\0" if strings else b"\0\0")

    bios = structure(0, 0, bytes([1, 2, 0, 0xE8, 3, 0]) + bytes(8), [b"Vendor Inc.", b"1.2.3"])
    system = structure(1, 0x100, bytes([1, 2, 3, 4]) + bytes(16) + bytes([6, 0, 0]),
                       [b"ACME", b"Box 9000", b"v1", b"  SN-12345 "])
    end = structure(127, 0xFEFF, b"", [])
    table = bios + system + end
    save("smbios", "raw", bytes([0, 3, 4, 0]) + struct.pack("<I", len(table)) + table)
    save("smbios", "table", table)
    save("smbios", "short-type1", structure(1, 1, bytes([1, 2, 3]), [b"A", b"B", b"C"]) + end)


def wql():
    for i, s in enumerate(["o'brien", "\\\\?\\Volume{0b1c}\\", "' OR Name <> '", "\\'", "18446744073709551615",
                           "65536", "a{b}c", 'x"y', "\u00fcn\u00ef\u200b"]):
        save("wql", str(i), s)


def ioctl():
    def ident(code_set, kind, assoc, data, nxt):
        return struct.pack("<IIHHI", code_set, kind, len(data), nxt, assoc) + data

    a = ident(1, 3, 0, bytes.fromhex("600a0b80002e4a2b0000a1b2c3d4e5f6"), 32 + 4)
    a += b"\xa5" * 4
    b = ident(2, 1, 0, b"VENDOR  PRODUCT SN-1", 0)
    ids = a + b
    save("ioctl", "device-id", struct.pack("<III", 1, 12 + len(ids), 2) + ids)
    serial = b"  WD-123456  \0"
    desc = struct.pack("<IIBBBBIIIIII", 1, 40 + len(serial), 0, 0, 0, 1, 0, 0, 0, 40, 11, 0) + bytes(4)
    save("ioctl", "device-descriptor", desc + serial)
    save("ioctl", "geometry", struct.pack("<qIIII", 1305, 12, 255, 63, 512) + struct.pack("<q", 10 << 30) + bytes(8))
    save("ioctl", "attributes", struct.pack("<IIQ", 16, 0, 3))
    save("ioctl", "device-number", struct.pack("<III", 7, 3, 0))


def extents():
    ext = struct.pack("<II", 2, 0) + struct.pack("<IIqq", 1, 0, 1 << 20, 10 << 30) + struct.pack("<IIqq", 7, 0, 4096, 512)
    save("extents", "extents", ext)

    def part(style, start, length, number, union):
        return struct.pack("<IIqqIBBxx", style, 0, start, length, number, 1, 0) + union

    save("extents", "gpt", part(1, 16 << 20, 5 << 30, 2, BASIC_DATA + guid("12345678-9abc-def0-0123-456789abcdef")
                                + struct.pack("<Q", 1 << 63) + bytes(72)))
    save("extents", "mbr", part(0, 1 << 20, 1 << 30, 1, bytes([7, 1, 1, 0]) + struct.pack("<I", 2048) + bytes(104)))
    save("extents", "raw", part(2, 0, 8 << 30, 0, bytes(112)))


def mountinfo():
    save("mountinfo", "sample", (
        "22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/a,upperdir=/b\n"
        "27 22 254:0 / /tmp rw,relatime shared:7 master:3 - ext4 /dev/vda rw\n"
        "44 27 259:0 / /tmp/kubelet/mnt\\040sp rw,relatime - xfs /dev/loop0p1 rw,attr2\n"
        "45 27 0:41 /sub/dir /tmp/kubelet/btr rw,relatime shared:9 - btrfs /dev/loop1p1 rw\n"
        "46 27 7:0 / /tmp/kubelet/nt rw,relatime - fuseblk /dev/loop2 rw,allow_other\n"
        "47 44 259:3 / /tmp/kubelet/mnt\\040sp rw,relatime - ext4 /dev/../etc/x rw\n"))
    save("mountinfo", "escapes", "50 27 8:1 /a\\134b /m\\011t\\012n\\040s\\134 rw - ext4 /dev/x\\040y rw\n")


def probe():
    """Input: flags, size (u32), patches (where u32 with bit 31 = from the end, len u8, bytes)."""
    def img(size, patches, flags=0):
        out = bytes([flags]) + struct.pack("<I", size)
        for where, data in patches:
            off = (abs(where) | (1 << 31)) if where < 0 else where
            for i in range(0, len(data), 255):
                chunk = data[i:i + 255]
                at = off - i if where < 0 else off + i
                out += struct.pack("<IB", at, len(chunk)) + chunk
        return out

    mib = 1 << 20
    ext4 = struct.pack("<III", 0x5C, 0x2C2, 0x7B)  # compat, incompat (extents, 64bit), ro_compat
    seeds = {
        "ext4": img(2 * mib, [(1024 + 0x38, b"\x53\xef"), (1024 + 0x5C, ext4), (1024 + 4, struct.pack("<I", 512)),
                              (1024 + 0x18, struct.pack("<I", 2))]),
        "xfs": img(mib, [(0, b"XFSB" + struct.pack(">IQ", 4096, 256))]),
        "btrfs": img(mib, [(0x10040, b"_BHRfS_M"), (0x10070, struct.pack("<Q", mib))]),
        "vfat": img(65536, [(0x52, b"FAT32   "), (510, b"\x55\xaa")], 1),
        "swap": img(65536, [(4086, b"SWAPSPACE2")], 1),
        "lvm": img(65536, [(512, b"LABELONE"), (512 + 0x18, b"LVM2 001")], 1),
        "md12": img(65536, [(4096, struct.pack("<I", 0xA92B4EFC))], 1),
        "bcache": img(65536, [(4096 + 16, struct.pack("<Q", 3)),
                              (4096 + 24, bytes.fromhex("c68573f64e1a45ca8265f57f48ba6d81"))], 1),
        "iso": img(65536, [(0x8001, b"CD001")], 1),
        "udf": img(131072, [(0x8001, b"BEA01"), (0x8801, b"NSR02")], 1),
        "luks2-secondary": img(262144, [(0x4000, b"SKUL\xba\xbe")], 1),
        "md090-end": img(3 * mib, [(-(mib * 3 - ((3 * mib) & ~0xFFFF) + 0x10000), struct.pack("<II", 0xA92B4EFC, 0))]),
        "md10-end": img(2 * mib + 4096, [(-8192, struct.pack("<II", 0xA92B4EFC, 1))]),
        "imsm": img(2 * mib, [(-1024, b"Intel Raid ISM Cfg Sig. ")]),
        "ddf": img(2 * mib, [(-512, struct.pack(">I", 0xDE11DE11))]),
        "zfs-end": img(3 * mib, [(-(512 << 10) + (128 << 10), struct.pack("<QQ", 0x00BAB10C, 5000))]),
        "gpt-backup": img(2 * mib, [(-512, b"EFI PART")]),
        "dos": img(4096, [(446 + 4, b"\x83"), (510, b"\x55\xaa")], 1),
    }
    # NTFS: 4 KiB clusters, MFT at cluster 4, 1 KiB records; $Volume (record 3) marked dirty.
    boot = bytearray(512)
    boot[3:11] = b"NTFS    "
    boot[0x0B:0x0D] = struct.pack("<H", 512)
    boot[0x0D] = 8
    boot[0x28:0x30] = struct.pack("<Q", 2048)
    boot[0x30:0x38] = struct.pack("<Q", 4)
    boot[0x40] = 0xF6  # -10: 2^10-byte records
    boot[510:512] = b"\x55\xaa"
    rec = bytearray(1024)
    rec[0:4] = b"FILE"
    rec[4:8] = struct.pack("<HH", 0x30, 3)
    rec[0x14:0x16] = struct.pack("<H", 0x38)
    at = 0x38
    rec[at:at + 8] = struct.pack("<II", 0x70, 40)
    rec[at + 16:at + 22] = struct.pack("<IH", 12, 24)
    rec[at + 24 + 8:at + 24 + 12] = bytes([3, 1, 1, 0])
    rec[at + 40:at + 44] = struct.pack("<I", 0xFFFFFFFF)
    rec[0x30:0x32] = struct.pack("<H", 7)
    for i in (1, 2):
        end = i * 512 - 2
        rec[0x30 + 2 * i:0x32 + 2 * i] = rec[end:end + 2]
        rec[end:end + 2] = struct.pack("<H", 7)
    seeds["ntfs-dirty"] = img(65536, [(0, bytes(boot)), (4 * 4096 + 3 * 1024, bytes(rec))], 1)
    for name, data in seeds.items():
        save("probe", name, data)


def gpt():
    """Input: flags, total LBAs (u32), head length (u16), param, head, tail (see gpt.rs)."""
    def table(lbs, total, parts, entries=4, mbr=True):
        array = bytearray(entries * 128)
        for slot, (kind, first, last) in parts.items():
            e = kind + bytes([slot] * 16) + struct.pack("<QQQ", first, last, 0) + "p".encode("utf-16-le")
            array[(slot - 1) * 128:(slot - 1) * 128 + len(e)] = e
        array = bytes(array)
        array_lbas = -(-len(array) // lbs)
        first_usable, last_usable = 2 + array_lbas, total - 2 - array_lbas

        def header(current, backup, entries_lba):
            h = struct.pack("<8sIIIIQQQQ16sQIII", b"EFI PART", 0x10000, 92, 0, 0, current, backup, first_usable,
                            last_usable, guid("01234567-89ab-cdef-0123-456789abcdef"), entries_lba, entries, 128,
                            zlib.crc32(array))
            return h[:16] + struct.pack("<I", zlib.crc32(h)) + h[20:]

        head = header(1, total - 1, 2).ljust(lbs, b"\0") + array
        if not mbr:
            head = bytes(512).ljust(lbs, b"\0") + head
        tail = array.ljust(array_lbas * lbs, b"\0") + header(total - 1, 1, total - 1 - array_lbas)
        return head.rstrip(b"\0"), tail

    def seed(flags, lbs_shift, total, param, head, tail):
        return bytes([flags | lbs_shift]) + struct.pack("<IHB", total, len(head), param) + head + tail

    MBR, FIX1, FIX2 = 4, 8, 16
    WRITE, ADD, GROW = 1 << 5, 2 << 5, 3 << 5
    one = {1: (LINUX_FS, 2048, 4095)}
    seeds = {
        "512-one": seed(MBR | GROW, 0, 16384, 0, *table(512, 16384, one)),
        "512-empty-add": seed(MBR | ADD, 0, 16384, 9, *table(512, 16384, {})),
        "512-msr-add": seed(MBR | ADD | FIX1 | FIX2, 0, 16384, 3, *table(512, 16384, {2: (MS_RESERVED, 34, 2047)})),
        "512-blank-lba0": seed(WRITE, 0, 8192, 0, *table(512, 8192, one, mbr=False)),
        "4096-two": seed(MBR | GROW | FIX1, 3, 4096, 1,
                         *table(4096, 4096, {1: (LINUX_FS, 256, 511), 3: (BASIC_DATA, 1024, 2047)}, entries=8)),
        "512-in-backup-area": seed(MBR | ADD | FIX1 | FIX2, 0, 8192, 0,
                                   *table(512, 8192, {1: (MS_RESERVED, 8191, 8191)})),
        "512-overlap": seed(MBR | WRITE | FIX1 | FIX2, 0, 8192, 0,
                            *table(512, 8192, {1: (LINUX_FS, 40, 3000), 2: (LINUX_FS, 2048, 4095)})),
    }
    head, tail = table(512, 16384, one)
    broken = head[:40] + bytes([head[40] ^ 0xFF]) + head[41:]  # primary CRC off: the backup is read
    seeds["512-backup-only"] = seed(MBR | WRITE, 0, 16384, 0, broken, tail)
    for name, data in seeds.items():
        save("gpt", name, data)


if __name__ == "__main__":
    for make in (paths, smbios, wql, ioctl, extents, mountinfo, probe, gpt):
        make()
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs if f.startswith("seed-"))
    print(f"seeds written to {OUT} ({total} bytes)", file=sys.stderr)
