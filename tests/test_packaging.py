"""What a user installs: the license ships with the wheel, its metadata says what PyPI shows, and
the shipped library carries no debug information or symbol table."""

import importlib.metadata
import os

import pytest

import fp8ops


def distribution():
    try:
        return importlib.metadata.distribution("fp8ops")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("fp8ops is not installed as a distribution (run from a source tree)")


def test_license_and_metadata():
    dist = distribution()
    names = [str(f) for f in dist.files or []]
    assert any(n.endswith("LICENSE") for n in names), names
    meta = dist.metadata
    assert meta["License-Expression"] == "BSD-3-Clause"
    classifiers = meta.get_all("Classifier")
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert any(c.startswith("Topic ::") for c in classifiers)
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in classifiers)
    assert meta.get_all("Project-URL")


def elf_section_names(path):
    import struct

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "a 64-bit ELF library"
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = sections[shstrndx][4]
    return [data[strtab + s[0] : data.index(b"\0", strtab + s[0])].decode() for s in sections]


def test_shipped_library_is_stripped():
    distribution()
    names = elf_section_names(fp8ops._LIBRARY)
    assert ".dynsym" in names
    assert not [n for n in names if n.startswith(".debug") or n == ".symtab"], names
    assert os.path.getsize(fp8ops._LIBRARY) > 0
