"""What a compiled GPU kernel costs per thread, read from its cubin and the assembler's report, without a GPU.

A cubin (the ``cubin`` that ``triton.compile`` returns) is an ELF file. Its ``.nv.info`` section
holds, for every kernel function, attributes that the CUDA driver reads when it loads the kernel:
records of ``(format, attribute, size, value)``, where the value starts with the function's symbol
index. Two of them are what a launch needs to know about one thread:

- ``EIATTR_REGCOUNT`` (0x2f): registers per thread. A block of ``T`` threads needs ``T x
  registers`` of the SM's 65,536 (every recent NVIDIA GPU), so the count bounds how many blocks fit
  at once, and past 255 ptxas must spill;
- ``EIATTR_FRAME_SIZE`` (0x11): bytes of each thread's stack frame in local memory (off-chip,
  cached): spilled registers live there.

Reading them from the file is what the driver does, and works the same whether the kernel was just
compiled or came from Triton's cache. ptxas's own report (``-v``; Triton runs ptxas with it and
prints the report when ``TRITON_DUMP_PTXAS_LOG=1``) adds the bytes it spilled and reloaded, which
the file does not keep: ``ptxas_report`` reads them from that text.

The shared memory a kernel needs is not in the cubin's static sections: Triton asks for it when it
launches (dynamic shared memory), and its compiled metadata says how much (``metadata.shared``).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

__all__ = ["CubinError", "CubinResources", "PtxasReport", "cubin_resources", "ptxas_report"]

EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
SHT_SYMTAB = 2
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4   # no value, a byte, a half-word, a sized value


class CubinError(ValueError):
    """Bytes that are not a 64-bit little-endian cubin with the kernel's attributes."""


@dataclass(frozen=True)
class CubinResources:
    """Per-thread resources of one kernel function in a cubin."""

    registers: int
    stack_frame: int   # bytes of local memory per thread (where spills go)


@dataclass(frozen=True)
class PtxasReport:
    """What ptxas said about one function (``-v``); None where it said nothing."""

    registers: int | None
    spill_stores: int | None
    spill_loads: int | None
    stack_frame: int | None


def _sections(data: bytes) -> list[dict]:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF file")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    if entry_size < 64 or section_offset + count * entry_size > len(data) or names_index >= count:
        raise CubinError("the section table lies outside the file")
    sections = []
    for index in range(count):
        name, kind, _, _, offset, size, link, info, _, item = struct.unpack_from(
            "<IIQQQQIIQQ", data, section_offset + index * entry_size)
        if offset + size > len(data) and kind != 8:   # 8: NOBITS (no bytes in the file)
            raise CubinError(f"section {index} lies outside the file")
        sections.append({"name": name, "type": kind, "offset": offset, "size": size, "link": link, "info": info,
                         "entry_size": item})
    names = sections[names_index]
    for section in sections:
        start = names["offset"] + section["name"]
        end = data.find(b"\0", start, names["offset"] + names["size"])
        section["name"] = data[start:end].decode("ascii", "replace") if end >= 0 else ""
    return sections


def _symbol_names(data: bytes, sections: list[dict]) -> dict[int, str]:
    table = next((s for s in sections if s["type"] == SHT_SYMTAB), None)
    if table is None or not table["entry_size"] or table["link"] >= len(sections):
        return {}
    strings = sections[table["link"]]
    names = {}
    for index in range(table["size"] // table["entry_size"]):
        (name_offset,) = struct.unpack_from("<I", data, table["offset"] + index * table["entry_size"])
        start = strings["offset"] + name_offset
        end = data.find(b"\0", start, strings["offset"] + strings["size"])
        names[index] = data[start:end].decode("ascii", "replace") if end >= 0 else ""
    return names


def _attributes(block: bytes) -> list[tuple[int, bytes]]:
    """The (attribute, value) records of one ``.nv.info`` section."""
    records, position = [], 0
    while position + 2 <= len(block):
        form, attribute = block[position], block[position + 1]
        if form == EIFMT_SVAL:
            if position + 4 > len(block):
                break
            (size,) = struct.unpack_from("<H", block, position + 2)
            records.append((attribute, block[position + 4:position + 4 + size]))
            position += 4 + size
        elif form in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            records.append((attribute, block[position + 2:position + 4]))
            position += 4
        else:
            raise CubinError(f"unknown .nv.info record format {form} at byte {position}")
    return records


def cubin_resources(cubin: bytes, kernel: str) -> CubinResources:
    """Registers per thread and stack frame bytes of ``kernel`` in ``cubin`` (see the module docstring)."""
    sections = _sections(cubin)
    symbols = _symbol_names(cubin, sections)
    found: dict[int, int] = {}
    for section in sections:
        if section["name"] != ".nv.info":
            continue
        block = cubin[section["offset"]:section["offset"] + section["size"]]
        for attribute, value in _attributes(block):
            if attribute in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(value) >= 8:
                symbol, number = struct.unpack_from("<II", value)
                if symbols.get(symbol, kernel) == kernel:
                    found[attribute] = number
    if EIATTR_REGCOUNT not in found:
        raise CubinError(f"no register count for {kernel} in the cubin's .nv.info")
    return CubinResources(registers=found[EIATTR_REGCOUNT], stack_frame=found.get(EIATTR_FRAME_SIZE, 0))


_FUNCTION = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def ptxas_report(log: str, kernel: str) -> PtxasReport:
    """Registers and spills of ``kernel`` from ptxas's ``-v`` report (the lines after its entry function)."""
    current = None
    registers = frame = stores = loads = None
    for line in log.splitlines():
        entry = _FUNCTION.search(line)
        if entry:
            current = entry.group(1)
            continue
        if current != kernel:
            continue
        if (match := _FRAME.search(line)) is not None:
            frame, stores, loads = (int(group) for group in match.groups())
        elif (match := _REGISTERS.search(line)) is not None:
            registers = int(match.group(1))
    return PtxasReport(registers, stores, loads, frame)
