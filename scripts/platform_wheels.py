"""Platform wheels of geist: py3-none-<platform>, one per native build (the binding is cffi's ABI
mode, so one wheel serves every Python 3 of that platform).

    .venv/bin/python scripts/platform_wheels.py OUT_DIR

Builds the package's wheel once (`pip wheel .`, which builds the host's core), then for each
build that exists writes OUT_DIR/geist-<version>-py3-none-<tag>.whl with that build's library in
geist/_native/ and a WHEEL file that says it is not pure:
    build/release/libgeist.so                     linux_x86_64
    build/linux-arm64-release/libgeist.so         linux_aarch64
    build/windows-x86_64-release/geist.dll        win_amd64
The Linux wheels are then given their manylinux tag by `auditwheel repair` (scripts/
test_wheels.sh). Prints the paths written.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILDS = {
    "linux_x86_64": ROOT / "build" / "release" / "libgeist.so",
    "linux_aarch64": ROOT / "build" / "linux-arm64-release" / "libgeist.so",
    "win_amd64": ROOT / "build" / "windows-x86_64-release" / "geist.dll",
}


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def retag(pure: Path, tag: str, lib: Path, out_dir: Path) -> Path:
    with zipfile.ZipFile(pure) as z:
        files = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
    dist_info = next(n.split("/")[0] for n in files if n.endswith(".dist-info/WHEEL"))
    name, version = dist_info.removesuffix(".dist-info").split("-")
    files = {n: d for n, d in files.items()
             if not n.startswith("geist/_native/") or n.endswith(".h")}
    files[f"geist/_native/{lib.name}"] = lib.read_bytes()
    wheel = [ln for ln in files[f"{dist_info}/WHEEL"].decode().splitlines()
             if ln.strip() and not ln.startswith(("Root-Is-Purelib:", "Tag:"))]
    wheel += ["Root-Is-Purelib: false", f"Tag: py3-none-{tag}"]
    files[f"{dist_info}/WHEEL"] = ("\n".join(wheel) + "\n").encode()
    record = f"{dist_info}/RECORD"
    files.pop(record, None)
    lines = [record_line(n, d) for n, d in sorted(files.items())] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    out = out_dir / f"{name}-{version}-py3-none-{tag}.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for n in [*sorted(k for k in files if k != record), record]:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if n.endswith((".so", ".dll")) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, files[n])
    return out


def main() -> int:
    out_dir = Path(sys.argv[1]).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.check_call([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                               "-w", tmp, str(ROOT)])
        pure = next(Path(tmp).glob("geist-*.whl"))
        for tag, lib in BUILDS.items():
            if lib.is_file():
                print(retag(pure, tag, lib, out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
