#version 450
#extension GL_GOOGLE_include_directive : require
// K and V rows of one session's rows [row0, row0 + n) into its cache: F32 words, or F16 pairs (one
// invocation per pair of values); INT8 (mode 2): per KV head an f32 scale max|x| / 127 and
// head_dim codes round(x / scale), half away from zero, as session/kv.c's quant_int8 (one
// invocation per row, K or V, and KV head). Row t at position pos goes to slot
// (pos - n_prefix) % rows (a ring on sliding-window layers), or with stage != 0 to slot t of the
// stage (k_at / v_at then point there: attn.comp reads this pass's rows from it).
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Kb { float K[]; };
layout(std430, binding = 3) readonly buffer Vb { float V[]; };
layout(std430, binding = 6) buffer KVb { uint KV[]; };
layout(push_constant) uniform P {
    uint row0, n, kd, vd, k_at, v_at, mode, nkv, hk, hv, n_prefix, rows, stage;
} p;
// *_at: KV words
#include "f16.glsl"
#include "exact.glsl"
uint slot_of(uint t) { return p.stage != 0u ? t : (IN[4u * t + 1u] - p.n_prefix) % p.rows; }
// a session's rows of one pass hold consecutive positions: into a ring of `rows` slots, row t is
// overwritten by row t + rows when the pass has it, so only the last `rows` rows are stored (on a
// GPU two invocations writing one slot race; lavapipe happened to run them in order)
bool overwritten(uint t) { return p.stage == 0u && p.row0 + p.n - t > p.rows; } // no overflow: rows may be ~0u
float round_away(float v) {
    float a = abs(v), f = floor(a);
    if (a - f >= 0.5) f += 1.0;
    return v < 0.0 ? -f : f;
}
void store_int8() {
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.n * 2u * p.nkv) return;
    uint t = p.row0 + g / (2u * p.nkv), rem = g % (2u * p.nkv);
    if (overwritten(t)) return;
    bool isk = rem < p.nkv;
    uint h = isk ? rem : rem - p.nkv, hd = isk ? p.hk : p.hv;
    uint slot = slot_of(t);
    uint x0 = t * (isk ? p.kd : p.vd) + h * hd;
    float amax = 0.0;
    for (uint i = 0u; i < hd; i++) amax = max(amax, abs(isk ? K[x0 + i] : V[x0 + i]));
    float d = fdiv_rn(amax, 127.0);
    float id = d > 0.0 ? fdiv_rn(1.0, d) : 0.0;
    uint rw = p.nkv * (1u + hd / 4u); // words per position
    uint w0 = (isk ? p.k_at : p.v_at) + slot * rw + h * (1u + hd / 4u);
    KV[w0] = floatBitsToUint(d);
    for (uint w = 0u; w < hd / 4u; w++) {
        uint word = 0u;
        for (uint k = 0u; k < 4u; k++) {
            float x = isk ? K[x0 + 4u * w + k] : V[x0 + 4u * w + k];
            precise float xi = x * id;
            float r = round_away(xi);
            r = isnan(r) ? 0.0 : clamp(r, -127.0, 127.0);
            word |= (uint(int(r)) & 0xFFu) << (8u * k);
        }
        KV[w0 + 1u + w] = word;
    }
}
void main() {
    if (p.mode == 2u) {
        store_int8();
        return;
    }
    uint per = (p.kd + p.vd) / 2u;
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.n * per) return;
    uint t = p.row0 + g / per, j = g % per;
    if (overwritten(t)) return;
    uint slot = slot_of(t);
    bool isk = j < p.kd / 2u;
    uint e = isk ? 2u * j : 2u * (j - p.kd / 2u);
    uint w = isk ? p.kd : p.vd;
    vec2 v = isk ? vec2(K[t * p.kd + e], K[t * p.kd + e + 1u]) : vec2(V[t * p.vd + e], V[t * p.vd + e + 1u]);
    uint at = isk ? p.k_at : p.v_at;
    if (p.mode == 1u) {
        KV[at + (slot * w + e) / 2u] = pack_f16x2(v);
    } else {
        KV[at + slot * w + e] = floatBitsToUint(v.x);
        KV[at + slot * w + e + 1u] = floatBitsToUint(v.y);
    }
}
