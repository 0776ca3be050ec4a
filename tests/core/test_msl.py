"""The Metal backend's kernels: every Vulkan kernel (native/src/backend/vulkan/shaders/*.comp,
compiled by SConstruct to build/release/shaders/*.spv) translates to MSL with exactly the
SPIRV-Cross flags the build uses (native/src/backend/metal/spirv_cross.flags), without an error,
into the binding layout metal.m relies on; subgroup operations become simdgroup functions.

The MSL is a build output (build/release/msl/*.metal), never committed; the test compares it with
its own translation. No Metal compiler runs here (Linux): compiling the MSL to a Metal library is
left to macOS (.github/workflows/macos.yml, where metal.m builds the pipelines).
Build first: `scons variant=release`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHADERS = ROOT / "native" / "src" / "backend" / "vulkan" / "shaders"
FLAGS_FILE = ROOT / "native" / "src" / "backend" / "metal" / "spirv_cross.flags"
BUILD = ROOT / "build" / "release"

SPIRV_CROSS = shutil.which("spirv-cross")
GLSLC = shutil.which("glslc")
needs_tools = pytest.mark.skipif(
    SPIRV_CROSS is None or GLSLC is None,
    reason="spirv-cross and glslc are needed (scripts/setup.sh installs them)")


def msl_flags() -> list[str]:
    """The flags file as SConstruct reads it: one argument per line, '#' lines are comments."""
    lines = FLAGS_FILE.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def translate(spv: Path) -> subprocess.CompletedProcess[str]:
    assert SPIRV_CROSS is not None
    return subprocess.run([SPIRV_CROSS, *msl_flags(), spv], capture_output=True, text=True,
                          timeout=60)


def kernels() -> list[str]:
    return sorted(p.stem for p in SHADERS.glob("*.comp"))


def test_flags_ask_for_msl_2_3_or_later() -> None:
    flags = msl_flags()
    assert "--msl" in flags
    version = int(flags[flags.index("--msl-version") + 1])
    assert version >= 20300, version
    # the binding layout of mtl_msl.h / metal.m
    assert "--msl-argument-buffers" in flags and "--msl-decoration-binding" in flags


def test_there_are_kernels() -> None:
    assert len(kernels()) >= 8, kernels()


def _with_includes(path: Path) -> str:
    """The shader's text with its `#include "x.glsl"` files' (attn.comp: attn_body.glsl's
    bindings and push constants)."""
    text = path.read_text(encoding="utf-8")
    for inc in re.findall(r'#include "([^"]+)"', text):
        text += _with_includes(path.parent / inc)
    return text


@needs_tools
@pytest.mark.parametrize("name", kernels())
def test_kernel_translates(name: str) -> None:
    comp = SHADERS / f"{name}.comp"
    spv = BUILD / "shaders" / f"{name}.spv"
    assert spv.is_file(), f"{spv} missing: run `scons variant=release` first"
    newest_src = max(p.stat().st_mtime for p in [comp, *SHADERS.glob("*.glsl")])
    assert spv.stat().st_mtime >= newest_src, f"{spv} is older than its source: rebuild"
    r = translate(spv)
    assert r.returncode == 0 and not r.stderr.strip(), f"{name}: spirv-cross failed:\n{r.stderr}"
    msl = r.stdout
    assert "#include <metal_stdlib>" in msl
    # the entry point and the layout metal.m binds: set 0 as an argument buffer at buffer(0),
    # push constants at buffer(1), the argument buffer's members numbered as the GLSL bindings
    sig = re.search(r"kernel void main0\((.*?)\)\s*\{", msl, re.S)
    assert sig, f"{name}: no kernel main0"
    params = sig.group(1)
    assert re.search(r"spvDescriptorSetBuffer0& \w+ \[\[buffer\(0\)\]\]", params), params
    glsl = _with_includes(comp)
    buffers = {int(i) for i in re.findall(r"\[\[buffer\((\d+)\)\]\]", params)}
    if "push_constant" in glsl:
        assert buffers == {0, 1}, f"{name}: buffers {sorted(buffers)}; push constants not at 1"
    else:
        assert buffers == {0}, sorted(buffers)
    declared = {int(b) for b in re.findall(r"binding\s*=\s*(\d+)", glsl)}
    struct = re.search(r"struct spvDescriptorSetBuffer0\s*\{(.*?)\};", msl, re.S)
    assert struct, f"{name}: no argument buffer"
    ids = {int(i) for i in re.findall(r"\[\[id\((\d+)\)\]\]", struct.group(1))}
    assert ids and ids <= declared, (name, sorted(ids), sorted(declared))
    # the build's own output is this translation (same flags, same input)
    built = BUILD / "msl" / f"{name}.metal"
    assert built.is_file(), f"{built} missing: the build did not translate {name}"
    assert built.read_text(encoding="utf-8") == msl


@needs_tools
def test_subgroup_ops_become_simdgroup_functions(tmp_path: Path) -> None:
    comp = tmp_path / "sg.comp"
    comp.write_text(
        "#version 450\n#extension GL_KHR_shader_subgroup_arithmetic : require\n"
        "#extension GL_KHR_shader_subgroup_ballot : require\n"
        "layout(local_size_x = 64) in;\n"
        "layout(std430, binding = 3) buffer Yb { float Y[]; };\n"
        "layout(push_constant) uniform P { uint n; } p;\n"
        "void main() { uint i = gl_GlobalInvocationID.x; if (i >= p.n) return;\n"
        "  Y[i] = subgroupAdd(Y[i]) + subgroupMax(Y[i]) + subgroupBroadcastFirst(Y[i])\n"
        "         + float(gl_SubgroupSize); }\n", encoding="utf-8")
    spv = tmp_path / "sg.spv"
    assert GLSLC is not None
    subprocess.run([GLSLC, "--target-env=vulkan1.2", "-O", "-o", spv, comp], check=True)
    r = translate(spv)
    assert r.returncode == 0, r.stderr
    for fn in ("simd_sum(", "simd_max(", "simd_broadcast_first("):
        assert fn in r.stdout, fn
    assert "[[thread_execution_width]]" in r.stdout or "[[threads_per_simdgroup]]" in r.stdout


@needs_tools
def test_a_broken_kernel_fails_the_translation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.spv"
    good = (BUILD / "shaders" / f"{kernels()[0]}.spv")
    if not good.is_file():
        pytest.skip("build first")
    data = bytearray(good.read_bytes())
    data[20:] = b"\xff" * (len(data) - 20)  # header kept, instructions garbage
    bad.write_bytes(bytes(data))
    r = translate(bad)
    assert r.returncode != 0


STEP_C = ROOT / "native" / "src" / "backend" / "metal" / "step.c"


def step_table() -> dict[str, tuple[set[int], int, int]]:
    """metal/step.c's gt_mtl_kernels: per kernel the bindings, push-constant bytes, local size."""
    src = STEP_C.read_text(encoding="utf-8")
    rows = re.findall(r'\[GT_MTL_K_\w+\] = \{"(\w+)", ([^,]+), (\d+) \* 4, (\d+)\}', src)
    return {name: ({int(b) for b in re.findall(r"B\((\d)\)", binds)}, 4 * int(words), int(local))
            for name, binds, words, local in rows}


def test_the_dispatch_plan_binds_what_each_kernel_declares() -> None:
    # metal.m encodes each kernel's argument buffer from step.c's table: the members it sets must
    # be exactly the [[id(n)]] members SPIRV-Cross emitted (setting an absent id is out of the
    # encoder's range), the push constants setBytes'd at buffer(1) exactly the size of the MSL
    # `struct P`, and the threadgroup as wide as the GLSL local_size_x
    table = step_table()
    assert sorted(table) == kernels(), (sorted(table), kernels())
    for name, (binds, pc_bytes, local) in table.items():
        built = BUILD / "msl" / f"{name}.metal"
        assert built.is_file(), f"{built} missing: run `scons variant=release` first"
        msl = built.read_text(encoding="utf-8")
        struct = re.search(r"struct spvDescriptorSetBuffer0\s*\{(.*?)\};", msl, re.S)
        assert struct, name
        ids = {int(i) for i in re.findall(r"\[\[id\((\d+)\)\]\]", struct.group(1))}
        assert ids == binds, (name, sorted(ids), sorted(binds))
        # the block's type is what main0 takes at buffer(1) (glslc -O strips the GLSL names)
        pc_type = re.search(r"constant (\w+)& \w+ \[\[buffer\(1\)\]\]", msl)
        assert pc_type, name
        pc = re.search(r"struct " + pc_type.group(1) + r"\s*\{(.*?)\};", msl, re.S)
        assert pc, name
        members = re.findall(r"^\s*(\w+) \w+;", pc.group(1), re.M)
        assert members and set(members) <= {"uint", "float", "int"}, (name, members)
        assert 4 * len(members) == pc_bytes, (name, members, pc_bytes)
        size = re.search(r"gl_WorkGroupSize \[\[maybe_unused\]\] = uint3\((\d+)u, (\d+)u, (\d+)u\)",
                         msl)
        assert size and size.groups() == (str(local), "1", "1"), (name, size)
