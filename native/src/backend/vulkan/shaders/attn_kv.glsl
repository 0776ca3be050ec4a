// The KV reads of attn.comp and attn_part.comp: where position q lives (session/kv.c's segments:
// the shared prefix's cache, the stage, the session's own cache or ring), its elements in each KV
// mode, and a query head's score against it in kv.c's order. The including shader declares PKV
// (binding 0), Q, KV and the push constants p (attn.comp's fields).
// a 32-bit word of the session's cache (own or stage) or of the prefix's
uint word(bool pre, uint i) { return pre ? PKV[i] : KV[i]; }
// element i of an F32 (mode 0) or F16 (mode 1) row of values
float elem(bool pre, uint mode, uint word0, uint i) {
    if (mode == 1u) return unpackHalf2x16(word(pre, word0 + (i >> 1)))[i & 1u];
    return uintBitsToFloat(word(pre, word0 + i));
}
int code8(bool pre, uint word0, uint i) { // INT8 code i after a row's scale word
    return int(word(pre, word0 + 1u + (i >> 2)) << (24u - 8u * (i & 3u))) >> 24;
}
// where position q lives: the prefix's cache?, its mode, the K and V words, its slot
struct Loc { bool pre; uint mode, k, v, slot; };
Loc loc(uint q) {
    if (q < p.n_prefix) return Loc(true, p.pmode, p.pk_at, p.pv_at, q % p.prows);
    if (q >= p.stage_pos0) return Loc(false, p.mode, p.sk_at, p.sv_at, p.stage_row0 + (q - p.stage_pos0));
    return Loc(false, p.mode, p.k_at, p.v_at, (q - p.n_prefix) % p.rows);
}
// session/kv.c's arithmetic on the plain path: q.k in 8 lanes reduced as reduce8, then the tail;
// INT8 caches (mode 2): per row and KV head an f32 scale and int8 codes, q.k summed in channel
// order then scaled, as kv.c. All-F16 segments: softmax_f16_plain (e^x by gt_vexp1, the sum in 8
// lanes by position); else e^x by exp and the same lanes (kv.c: expf, the sum in double:
// rounding apart); out += w * v in position order; no fused multiply-adds anywhere.
float score(Loc l, uint g, uint qb) {
    if (l.mode == 2u) { // INT8: one sum in channel order, times the row's scale (kv.c)
        uint r0 = l.k + l.slot * (p.n_head_kv * (1u + p.hk / 4u)) + g * (1u + p.hk / 4u);
        precise float acc = 0.0;
        for (uint i = 0u; i < p.hk; i++) {
            precise float pr = Q[qb + i] * float(code8(l.pre, r0, i));
            acc = acc + pr;
        }
        precise float dt = acc * uintBitsToFloat(word(l.pre, r0));
        return dt;
    }
    uint ro = l.slot * p.n_head_kv * p.hk + g * p.hk;
    uint n8 = p.hk / 8u * 8u;
    float a[8];
    for (uint k = 0u; k < 8u; k++) a[k] = 0.0;
    for (uint i = 0u; i < n8; i += 8u)
        for (uint k = 0u; k < 8u; k++) {
            precise float pr = Q[qb + i + k] * elem(l.pre, l.mode, l.k, ro + i + k);
            precise float sm = a[k] + pr;
            a[k] = sm;
        }
    precise float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
    precise float s = (t0 + t2) + (t1 + t3);
    for (uint i = n8; i < p.hk; i++) {
        precise float pr = Q[qb + i] * elem(l.pre, l.mode, l.k, ro + i);
        s = s + pr;
    }
    return s;
}
