#version 450
#extension GL_GOOGLE_include_directive : require
#define ATTN_PART
#include "attn_body.glsl"
