// The row's own K and V heads at its slot, kvstore.comp's words: K from kcur (already rounded as
// the cache holds it: the same f16 bits), V from the products' scratch (VC from f_vb), through
// the cache's writable binding (KVW, 10; binding 6 reads it). Shared by attn_body.glsl's fresh
// kernels (64 lanes) and vulkan_only/attnfast.comp (128): the includer declares KVW, VC, kcur,
// f_pos, f_vb and p, and includes attn_kv.glsl (loc) and f16.glsl (pack_f16x2) first.
#ifndef GEIST_ATTN_STORE_GLSL
#define GEIST_ATTN_STORE_GLSL
void store_row_kv(uint g, uint lid, uint lanes) { // KV head g, the workgroup's lanes
    Loc l = loc(f_pos);
    uint kw = p.mode == 1u ? p.hk / 2u : p.hk, vw = p.mode == 1u ? p.hv / 2u : p.hv;
    uint kat = l.k + (l.slot * p.n_head_kv + g) * kw, vat = l.v + (l.slot * p.n_head_kv + g) * vw;
    for (uint w = lid; w < kw + vw; w += lanes) {
        bool v = w >= kw;
        uint i = v ? w - kw : w;
        if (p.mode == 1u)
            KVW[(v ? vat : kat) + i] = pack_f16x2(v ? vec2(VC[f_vb + 2u * i], VC[f_vb + 2u * i + 1u])
                                                    : vec2(kcur[2u * i], kcur[2u * i + 1u]));
        else
            KVW[(v ? vat : kat) + i] = floatBitsToUint(v ? VC[f_vb + i] : kcur[i]);
    }
}
#endif
