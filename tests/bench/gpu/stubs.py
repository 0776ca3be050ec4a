"""Stub libraries for roles.py (session 18): geist built with one part of a Vulkan kernel or
of the step left out or repeated, each a text substitution in a clean worktree of HEAD. Their
results are wrong (finite values, so a run completes); their decode time against HEAD's says
what the part costs on the device.

    tests/bench/gpu/stubs.py DEST [NAME ...]     (no NAME: every stub; DEST/stub-NAME.so each:
                                                  DEST .dev-gpu/var for device.sh study)

The anchors are HEAD's text: a stub whose anchor moved is reported and skipped. Needs this
checkout's .venv (SCons) and glslc, as the release build does. PATCHED's names (none now) are
candidates kept as patches in this folder, built the same way (HEAD, the patch, then their
substitutions). Each build also leaves DEST/stub-NAME.mvfast_sg.spv for pipestats.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SH = "native/src/backend/vulkan/shaders/"
VK = "native/src/backend/vulkan/vk_forward.c"
ATTN_CALL = ("            rec_attn(r, cf, G, il, R->window,\n                     staged[g] ? "
             "(uint32_t)rows[G->r0].pos : UINT32_MAX,\n                     "
             "attn_shape_at(c, fw, cf, (uint32_t)G->n, rows[G->r0 + G->n - 1].pos, G->kv,\n"
             "                                   R->window),\n                     fr);")
# name: [(file, text, replacement)], what is left out
STUBS: dict[str, list[tuple[str, str, str]]] = {
    # nothing left out: HEAD built the same way, the baseline beside a change not yet committed
    "head": [],
    # the attention kernel returns at once: the dispatch's floor
    "attn_empty": [(SH + "attn_body.glsl", "    uint ngrp = p.n_head / GSZ;",
                    "    if (gl_NumWorkGroups.x > 0u) return;\n    uint ngrp = p.n_head / GSZ;")],
    # a score is one product, not a head's
    "attn_noscore": [(SH + "attn_body.glsl", "    uint o = jj * (p.hk + 1u);\n",
                      "    uint o = jj * (p.hk + 1u);\n    return qs[QI(k, 0u)] * vt[o];\n")],
    # no K/V tile loads (constant words)
    "attn_noload": [(SH + "attn_body.glsl", "xs[u] = PKV[at[u]];", "xs[u] = 0x3C003C00u;"),
                    (SH + "attn_body.glsl", "xs[u] = (curm >> u & 1u) != 0u ? 0u : KV[at[u]];",
                     "xs[u] = 0x3C003C00u;")],
    # no QK norm, no rotary in the fresh prologue
    "attn_noprol": [(SH + "attn_body.glsl",
                     "bool normed = (p.fresh & 1u) != 0u, roped = (p.fresh & 2u) != 0u",
                     "bool normed = false, roped = false")],
    # no merge of the chunks (nor the O product's 8-bit rows it makes)
    "attn_nomerge": [(SH + "attn_body.glsl", "if (last == 0u) return; // the whole workgroup",
                      "return;")],
    # no V tiles (loads and weighted sums)
    "attn_nov": [(SH + "attn_body.glsl",
                  "        for (uint j0 = 0u; j0 < n_ctx;) {\n            uint nt = min(ntv,",
                  "        for (uint j0 = n_ctx; j0 < n_ctx;) {\n            uint nt = min(ntv,")],
    # the attention dispatched twice a layer (the same result: does a second run cost less?)
    "attn_twice": [(VK, ATTN_CALL,
                    "            for (int twice = 0; twice < 2; twice++)\n" + ATTN_CALL)],
    # in a pass of several sessions, only the first session's attention dispatched (session 26):
    # with roles.py --npcs's plain GPU ms a pass, what the others' dispatches cost, near what one
    # dispatch for every session's rows would save
    "attn_first_only": [(VK, ATTN_CALL, "            if (g == 0)\n" + ATTN_CALL)],
    # a tile's words loaded 4 a lane at once, not 16 (less unrolled code, more waits)
    "attn_lb4": [(SH + "attn_body.glsl", "#define LB 16u", "#define LB 4u")],
    # no in-product 8-bit rows (constant words)
    "mv_noactq": [(SH + "matvec.comp",
                   "for (uint w0 = 0u; w0 < nw; w0 += 64u) "
                   "actq_round(t0 * p.n_in, w0, nw, lid, kq);",
                   "for (uint w0 = lid; w0 < nw; w0 += 64u) { SQ[w0] = 0x01010101u; "
                   "SD[w0 >> 3] = 0.01; }")],
    # no in-product RMSNorm
    "mv_nonorm": [(SH + "matvec.comp", "normed = selfq && (p.accumulate & 16u) != 0u;",
                   "normed = false;")],
    # the driver's division instead of the exact one (session 19's integer residuals): what the
    # correctly rounded divisions (twice in every 8-bit round; the softmax's 1 / sum, the
    # SiLU/GELU) still cost
    "fdiv_native": [(SH + "exact.glsl", "float fdiv_rn(float a, float b) {\n",
                     "float fdiv_rn(float a, float b) {\n    if (b != 0.0) return a / b;\n")],
    # not a stub but a variant (the same bits: the fixtures' tests pass on its library): the
    # 8-bit rows' block maxima by subgroup operations instead of shared memory and barriers.
    # Blocks of 32 (8 lanes, one cluster): no barrier a round (was 1); blocks of 256: the 8-lane
    # groups' (magnitude, first such value) by clustered max/min and a shuffle, the groups'
    # floats by round parity, one barrier a round (was 2). Assumes a workgroup's lanes in
    # subgroup order (NVIDIA's, lavapipe's) and subgroups of at least 8 lanes; lanes past 64
    # (attnfast.comp's) write no shared float, as in actq.glsl.
    "actq_subgroup": [
        (SH + "actq.glsl", "#define GEIST_ACTQ_GLSL\n",
         "#define GEIST_ACTQ_GLSL\n#extension GL_KHR_shader_subgroup_clustered : require\n"
         "#extension GL_KHR_shader_subgroup_shuffle : require\n"),
        (SH + "actq.glsl",
         "        if (own) AQ_A(par, lane) = m;\n"
         "        barrier(); // the next round writes the other half: no barrier after the reads\n"
         "        float amax = 0.0;\n"
         "        for (uint j = 0u; j < 8u; j++) amax = max(amax, AQ_A(par, g0 + j));\n",
         "        float amax = subgroupClusteredMax(m, 8u);\n"),
        (SH + "actq.glsl",
         "    if (own) {\n        AQ_A(0u, lane) = a;\n        AQ_V(lane) = v;\n    }\n"
         "    barrier();\n"
         "    if (own && (lane & 7u) == 0u) {\n        for (uint j = 1u; j < 8u; j++) {\n"
         "            float aj = AQ_A(0u, lane + j);\n            if (aj > a) {\n"
         "                a = aj;\n                v = AQ_V(lane + j);\n            }\n"
         "        }\n        AQ_GA(lane >> 3) = a;\n        AQ_GV(lane >> 3) = v;\n    }\n"
         "    barrier(); // the next round writes these floats after every lane's reads here\n",
         "    uint gp = ((w0 >> 6) & 1u) * 16u;\n"
         "    float a8 = subgroupClusteredMax(a, 8u);\n"
         "    uint fi = subgroupClusteredMin(a == a8 ? gl_SubgroupInvocationID : 0xFFFFFFFFu,"
         " 8u);\n"
         "    float v8 = subgroupShuffle(v, fi);\n"
         "    if (own && (lane & 7u) == 0u) {\n        ACTQ_SH(gp + (lane >> 3)) = a8;\n"
         "        ACTQ_SH(gp + 8u + (lane >> 3)) = v8;\n    }\n    barrier();\n"),
        (SH + "actq.glsl",
         "        float aj = AQ_GA(j);\n        if (aj > amax) {\n            amax = aj;\n"
         "            maxv = AQ_GV(j);\n",
         "        float aj = ACTQ_SH(gp + j);\n        if (aj > amax) {\n            amax = aj;\n"
         "            maxv = ACTQ_SH(gp + 8u + j);\n")],
    # a variant too (the same bits): the RMSNorm's float-float lane tree (rmsscale.glsl's
    # rms_finish: the in-product norms, rmsnorm.comp, quant_fused, the attention's QK norm) on
    # subgroup shuffles for its steps below the subgroup's size: the same pairs (lane l adds
    # lane l + h's, h = 32, 16, .., 1) in the same order, 3 barriers where it took 8 (NVIDIA's
    # 32 lanes). Assumes a workgroup's lanes in subgroup order, as actq_subgroup does.
    "rms_subgroup": [
        (SH + "rmsscale.glsl", "#define GEIST_RMSSCALE_GLSL\n",
         "#define GEIST_RMSSCALE_GLSL\n#extension GL_KHR_shader_subgroup_basic : require\n"
         "#extension GL_KHR_shader_subgroup_shuffle_relative : require\n"),
        (SH + "rmsscale.glsl",
         "    nred[lid] = s;\n    barrier();\n    for (uint h = 32u; h > 0u; h >>= 1) {\n"
         "        if (lid < h) nred[lid] = ff_add(nred[lid], nred[lid + h]);\n"
         "        barrier();\n    }\n"
         "    // m = ss / n + eps; y = 1 / sqrt(m) by one Newton step in float-float from the float"
         " guess\n    vec2 ss = nred[0];\n",
         "    nred[lid] = s;\n    barrier();\n    uint h = 32u;\n"
         "    for (; h >= gl_SubgroupSize && h > 0u; h >>= 1) {\n"
         "        if (lid < h) nred[lid] = ff_add(nred[lid], nred[lid + h]);\n"
         "        barrier();\n    }\n"
         "    if (h > 0u) {\n        s = nred[lid];\n"
         "        for (; h > 0u; h >>= 1) {\n"
         "            vec2 o = subgroupShuffleDown(s, h);\n"
         "            if (lid < h) s = ff_add(s, o);\n        }\n"
         "        barrier(); // every lane has read nred\n"
         "        if (lid == 0u) nred[0] = s;\n        barrier();\n    }\n"
         "    vec2 ss = nred[0];\n")],
    # no super-block products (Q4_K, Q6_K)
    "mv_nokq": [(SH + "matvec.comp", "for (uint b = lane; b < nbk; b += 8u) {",
                 "for (uint b = lane; b < 0u; b += 8u) {")],
    # the in-product 8-bit rows' first round only, the rest constant words (session 22): against
    # mv_noactq, what the rounds after the first cost, the bound of making a row in one round
    # (more lanes a workgroup; the clock's 6.5 us of a Gemma 3 product with its norm is ~3 rounds)
    "mv_actq_1round": [(SH + "matvec.comp",
                        "for (uint w0 = 0u; w0 < nw; w0 += 64u) "
                        "actq_round(t0 * p.n_in, w0, nw, lid, kq);",
                        "actq_round(t0 * p.n_in, 0u, nw, lid, kq); "
                        "for (uint w0 = 64u + lid; w0 < nw; w0 += 64u) { SQ[w0] = 0x01010101u; "
                        "SD[w0 >> 3] = 0.01; }")],
    # session 24's fast attention (vulkan_only/attnfast.comp, not measured on a GPU in that
    # session): returning at once (its floor), and 2 or 8 positions a subgroup's round, not 4
    "attnfast_empty": [(SH + "vulkan_only/attnfast.comp",
                        "    uint c = gl_WorkGroupID.x % p.n_split,",
                        "    if (gl_NumWorkGroups.x > 0u) return;\n"
                        "    uint c = gl_WorkGroupID.x % p.n_split,")],
    "attnfast_u2": [(SH + "vulkan_only/attnfast.comp", "#define U 4u", "#define U 2u")],
    "attnfast_u8": [(SH + "vulkan_only/attnfast.comp", "#define U 4u", "#define U 8u")],
    # outfast.comp's clusters (session 34): at most 6 blocks a lane (Gemma 3's and SmolLM2's
    # rows 4 lanes of 5), or 1 (a row a subgroup, as before session 34, with its other changes)
    "out_xb6": [(VK, "#define OUT_XB_MAX 4u", "#define OUT_XB_MAX 6u")],
    "out_xb1": [(VK, "#define OUT_XB_MAX 4u", "#define OUT_XB_MAX 1u")],
    # blocks' workgroups of one group of outputs (session 33: mvt_groups), or at most 2
    "mvt_groups1": [(VK, "#define MVT_GROUPS 4u", "#define MVT_GROUPS 1u")],
    "mvt_groups2": [(VK, "#define MVT_GROUPS 4u", "#define MVT_GROUPS 2u")],
    # blocks of 8 rows made again (session 33 left them out: 93-96 registers with the groups)
    "mvt_blocks8": [(VK, "#define MVT_MODES 4\n", "#define MVT_MODES 5\n")],
    # a block's copy loaded at once, not in rounds of 2 runs a lane
    "mvt_copy_at_once": [(SH + "vulkan_only/mvfast.comp", "const uint CQ = 2u;",
                          "const uint CQ = NQ;")],
    # Q, K and V's blocks chosen each from its own outputs (before session 33's fill_groups)
    "qkv_fill_off": [(VK, "            r->fill_groups = (w[W_Q].n_out + w[W_K].n_out + "
                          "w[W_V].n_out + MVF_ROWS - 1) / MVF_ROWS;\n", "")],
    # fast passes with rmsnorm.comp's exact norms, not normfast.comp (what the latter saves)
    "normfast_off": [(VK, "const bool fast = (r->fast || r->fast_attn) && "
                          "r->fw->pipe[P_NORM_FAST] != VK_NULL_HANDLE;",
                      "const bool fast = false;")],
}
# Candidates kept as patches against main: name -> (a patch in this folder, then substitutions
# on the patched text as STUBS' entries). Results are right; their times against head's say
# whether the patch pays. Session 32's (session32-blocks-groups.patch) landed in session 33;
# its variants are STUBS' mvt_* entries now.
PATCHED: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}


def build(name: str, dest: Path, work: Path) -> bool:
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=work, check=True)
    subs = STUBS.get(name, [])
    if name in PATCHED:
        patch, subs = PATCHED[name]
        r = subprocess.run(["git", "apply", str(Path(__file__).resolve().parent / patch)],
                           cwd=work, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{name}: {patch} does not apply: skipped\n{r.stderr}", file=sys.stderr)
            return False
    for f, text, repl in subs:
        p = work / f
        src = p.read_text(encoding="utf-8")
        if src.count(text) != 1:
            print(f"{name}: anchor not found once in {f}: skipped", file=sys.stderr)
            return False
        p.write_text(src.replace(text, repl), encoding="utf-8")
    r = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "SCons", "-Q", "-j2",
                        "variant=release", "build/release/libgeist.so"], cwd=work,
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: build failed\n{r.stdout[-2000:]}{r.stderr[-2000:]}", file=sys.stderr)
        return False
    subprocess.run(["strip", "--strip-unneeded", "-o", str(dest / f"stub-{name}.so"),
                    str(work / "build" / "release" / "libgeist.so")], check=True)
    spv = work / "build" / "release" / "shaders" / "vulkan_only" / "mvfast_sg.spv"
    if spv.exists():  # for pipestats there (its registers)
        (dest / f"stub-{name}.mvfast_sg.spv").write_bytes(spv.read_bytes())
    print("built", name, flush=True)
    return True


def main() -> int:
    dest = Path(sys.argv[1]).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(STUBS)
    unknown = [n for n in names if n not in STUBS and n not in PATCHED]
    if unknown:
        print(f"unknown stubs {unknown}; known: {sorted(STUBS) + sorted(PATCHED)}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "wt"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(work), "HEAD"], cwd=REPO,
                       check=True)
        try:
            ok = [build(n, dest, work) for n in names]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(work)], cwd=REPO)
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
