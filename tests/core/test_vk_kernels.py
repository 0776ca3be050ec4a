"""The Vulkan kernels' shared memory: every kernel the build compiles (build/release/shaders,
and vulkan_only/ for the Vulkan-only builds: fresh, grouped, integer-dot, fused) declares at most
GT_VK_SHARED_NEED bytes of workgroup memory (vk.h), the least a device must offer to be used
(vk_device.c): 32 KiB, what phones' GPUs offer. The sizes are read from the SPIR-V itself (its
Workgroup variables, specialization constants at their defaults), so a kernel that grows past
it fails here, not on a device that refuses or, worse, silently mis-runs the pipeline (lavapipe
reports 32 KiB and does not enforce it). Build first: `scons variant=release`.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "release" / "shaders"
VK_H = ROOT / "native" / "src" / "backend" / "vulkan" / "vk.h"

# SPIR-V opcodes the sizes need (the SPIR-V specification's numbers)
OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR = 20, 21, 22, 23
OP_TYPE_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER = 28, 30, 32
OP_CONSTANT, OP_SPEC_CONSTANT, OP_VARIABLE = 43, 50, 59
STORAGE_WORKGROUP = 4


def shared_bytes(spv: Path) -> int:
    """The bytes of a module's Workgroup variables (scalars and vectors of 4-byte words, arrays
    and structs of them: what geist's kernels declare)."""
    data = spv.read_bytes()
    words = struct.unpack(f"<{len(data) // 4}I", data)
    assert words[0] == 0x07230203, spv  # the SPIR-V magic number
    size: dict[int, int] = {}
    const: dict[int, int] = {}
    ptr: dict[int, tuple[int, int]] = {}
    total, i = 0, 5
    while i < len(words):
        op, n = words[i] & 0xFFFF, words[i] >> 16
        a = words[i + 1:i + n]
        if op in (OP_TYPE_INT, OP_TYPE_FLOAT):
            size[a[0]] = a[1] // 8
        elif op == OP_TYPE_BOOL:
            size[a[0]] = 4
        elif op == OP_TYPE_VECTOR:
            size[a[0]] = size[a[1]] * a[2]
        elif op in (OP_CONSTANT, OP_SPEC_CONSTANT):
            const[a[1]] = a[2]
        elif op == OP_TYPE_ARRAY:
            size[a[0]] = size.get(a[1], 0) * const.get(a[2], 0)
        elif op == OP_TYPE_STRUCT:
            size[a[0]] = sum(size.get(m, 0) for m in a[1:])
        elif op == OP_TYPE_POINTER:
            ptr[a[0]] = (a[1], a[2])
        elif op == OP_VARIABLE and ptr[a[0]][0] == STORAGE_WORKGROUP:
            total += size[ptr[a[0]][1]]
        i += n
    return total


def _need() -> int:
    m = re.search(r"#define GT_VK_SHARED_NEED (\d+)u", VK_H.read_text(encoding="utf-8"))
    assert m, "vk.h defines GT_VK_SHARED_NEED"
    return int(m.group(1))


@pytest.mark.skipif(not BUILD.is_dir(), reason="no kernels built (glslc absent at build time)")
def test_every_kernel_fits_the_shared_memory_a_device_must_offer() -> None:
    spvs = sorted(BUILD.glob("*.spv")) + sorted((BUILD / "vulkan_only").glob("*.spv"))
    names = {p.stem for p in spvs}
    # the attention's builds are the largest: each of them is here
    assert {"attn", "attn_part", "attn_fresh", "attn_part_fresh", "attn_grp", "attn_part_grp",
            "attn_fresh_grp", "attn_part_fresh_grp", "matmul", "matvec"} <= names, names
    sizes = {p.stem: shared_bytes(p) for p in spvs}
    need = _need()
    assert need == 32768
    over = {k: v for k, v in sizes.items() if v > need}
    assert not over, over
    # the measure is not vacuous: the attention's tiles and scores take most of it
    assert sizes["attn_part_fresh"] > 30000 and sizes["attn_grp"] > 30000, sizes
