// Dot products of 4 packed 8-bit values (byte k of a word: value k), for the integer block sums
// of matmul.comp and matvec.comp. Built twice (SConstruct): plainly, in shifts and multiplies
// (every device; Metal's translation), and with GT_IDOT, as SPV_KHR_integer_dot_product's
// OpSDot / OpSUDot (the *_idot kernels: one instruction where the device has them accelerated,
// vk_device.c's choice). Integer sums: both give the same values, so the same bits downstream.
#ifdef GT_IDOT
#extension GL_EXT_spirv_intrinsics : require
// capabilities DotProduct (6019), DotProductInput4x8BitPacked (6018); the literal 0 is
// PackedVectorFormat4x8Bit
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int gt_sdot(uint a, uint b, spirv_literal int fmt);  // OpSDot: signed x signed bytes
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int gt_sudot(uint a, uint b, spirv_literal int fmt); // OpSUDot: signed a x unsigned b
int dot4ss(uint a, uint b) { return gt_sdot(a, b, 0); }
int dot4su(uint a, uint b) { return gt_sudot(a, b, 0); }
int bsum4(uint a) { return gt_sdot(a, 0x01010101u, 0); }
#else
int sbyte(uint w, uint k) { return int(w << (24u - 8u * k)) >> 24; }
// the dot product of the four signed bytes of a and of b
int dot4ss(uint a, uint b) {
    return sbyte(a, 0u) * sbyte(b, 0u) + sbyte(a, 1u) * sbyte(b, 1u) + sbyte(a, 2u) * sbyte(b, 2u) +
           sbyte(a, 3u) * sbyte(b, 3u);
}
// the dot product of the four signed bytes of a and the four unsigned bytes of b
int dot4su(uint a, uint b) {
    return sbyte(a, 0u) * int(b & 255u) + sbyte(a, 1u) * int((b >> 8) & 255u) +
           sbyte(a, 2u) * int((b >> 16) & 255u) + sbyte(a, 3u) * int(b >> 24);
}
// the sum of the four signed bytes of a
int bsum4(uint a) { return sbyte(a, 0u) + sbyte(a, 1u) + sbyte(a, 2u) + sbyte(a, 3u); }
#endif
