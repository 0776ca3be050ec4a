"""Host and device memory of the vulkan backend for one model, four ways (load_file and
load_from_memory, each with and without host-pointer import), one JSON line each.

    python tests/bench/vulkan_memory.py MODEL.gguf

Pin the driver with the loader's own variables (VK_DRIVER_FILES). The host figures are the
process's RSS (/proc/self/status) around the load; the device figures are the model's memory
report (docs/MEMORY.md has the numbers measured on the NVIDIA H200)."""

from __future__ import annotations

import gc
import json
import os
import sys

import geist


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024
    return out


def main(path: str) -> None:
    size = os.path.getsize(path)
    for how in ("file", "memory", "memory_no_import", "file_no_import"):
        gc.collect()
        eng = geist.Engine(backend="vulkan", no_import=how.endswith("no_import"))
        buf = open(path, "rb").read() if how.startswith("memory") else None
        before = _status()
        m = (geist.Model.load(path, engine=eng) if buf is None
             else geist.Model.from_buffer(buf, engine=eng))
        after = _status()
        s = m.session(max_seq_len=256)
        s.eval([1, 2, 3, 4])
        rec = {"how": how, "device": eng.device, "file_bytes": size, "model_memory": m.memory(),
               "session_memory": s.memory(),
               "rss_added": after["VmRSS"] - before["VmRSS"],
               "rss_anon_added": after["RssAnon"] - before["RssAnon"],
               "rss_file_added": after["RssFile"] - before["RssFile"],
               "rss_added_pct_of_file": 100.0 * (after["VmRSS"] - before["VmRSS"]) / size}
        print(json.dumps(rec), flush=True)
        s.close()
        m.close()
        eng.close()
        del buf


if __name__ == "__main__":
    main(sys.argv[1])
