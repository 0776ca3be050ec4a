// The split attention's merge of one (row, query head)'s chunks (attn_merge.comp, and the last
// chunk of attn_part.comp to finish): [m, l, o[0..hv)] per chunk c < nc at floats (base + c) st
// of the partials (MERGE_PT(i), the includer's read), st = hv + 2; with M the largest chunk max
// and w_c = e^(m_c - M) (gt_vexp1's steps, every chunk's max rescaled to M), out = (sum_c w_c
// o_c) / (sum_c w_c l_c), the chunks in order, channel i to MERGE_OUT(i, v). The includer
// declares shared float wsh[MAX_SPLIT] and includes vexp.glsl; every lane calls it (a barrier).
#ifndef GEIST_ATTN_MERGE_GLSL
#define GEIST_ATTN_MERGE_GLSL
#define MAX_SPLIT 64u // chunks per (row, head) at most (vk_forward.c's)
void attn_merge(uint base, uint nc, uint hv, uint lid) {
    uint st = hv + 2u;
    float mx = -1.0 / 0.0;
    for (uint c = 0u; c < nc; c++) mx = max(mx, MERGE_PT((base + c) * st));
    if (lid < nc) {
        precise float x = MERGE_PT((base + lid) * st) - mx;
        wsh[lid] = vexp1(x);
    }
    barrier();
    precise float tot = 0.0;
    for (uint c = 0u; c < nc; c++) {
        precise float wl = wsh[c] * MERGE_PT((base + c) * st + 1u);
        tot = tot + wl;
    }
    float inv = fdiv_rn(1.0, tot);
    for (uint i = lid; i < hv; i += 64u) {
        precise float o = 0.0;
        for (uint c = 0u; c < nc; c++) {
            precise float wo = wsh[c] * MERGE_PT((base + c) * st + 2u + i);
            o = o + wo;
        }
        precise float r = o * inv;
        MERGE_OUT(i, r);
    }
}
#endif
