/* The Metal forward pass's dispatch plan (backend/metal/step.c) EXECUTED, on Vulkan: no Metal
 * device exists here, but the plan's kernels are the very SPIR-V the MSL is translated from, so
 * running the plan with them on lavapipe checks what metal.m encodes (which kernels in which order,
 * their push constants, group counts, and every binding: weights inside overlapping views at
 * 256-aligned offsets with the remainder in w_off, each session's KV at the layer's offset, the
 * logits gathered for the rows that want them) against cpu_scalar's logits. It does NOT check
 * metal.m's Objective-C, Metal's argument buffers or the MSL compiler.
 *
 * Run by tests/core/test_metal_step_vk.py (which pins lavapipe and compares the logits):
 *   test_metal_step_vk MODEL.gguf OUT.f32 MAX_BUFFER [KV_A KV_B]
 * plans MODEL's weights as metal.m does (page 4096, maxBufferLength MAX_BUFFER), copies each
 * view into its own Vulkan buffer, and runs two passes: session A (KV mode KV_A, a geist_kv_mode
 * number, default 1 = F16) prefills PROMPT_A with every row's logits; then one pass of A's next
 * token (pos 8) with session B (KV_B, default 0 = F32) prefilling PROMPT_B, only B's last row
 * wanting logits. OUT gets the 10 logit rows. Without arguments (the
 * suite's plain run of every test binary) it says so and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* not in the in-kernel clock build (scons gpu_clock=1): its kernels also bind 13 */
#if defined(GEIST_HAVE_VULKAN) && !defined(GEIST_VK_CLOCK)
#include "backend/metal/step.h"
#include "backend/vulkan/vk.h"
#include "backend/vulkan/vk_spv.h"
#include "vk_hbuf.h"
#include "geist.h"
#include "model/model.h"

static const int32_t PROMPT_A[8] = {5, 17, 42, 99, 123, 7, 250, 3};
static const int32_t NEXT_A = 77;
static const int32_t PROMPT_B[5] = {11, 200, 150, 8, 64};
#define MAX_SEQ 32

typedef struct kvs {
    hbuf b;
    gt_mtl_kv_layout lay;
} kvs;

typedef struct runner {
    gt_vk_ctx *c;
    const geist_model *m;
    gt_mtl_plan plan;
    hbuf *views;
    hbuf scratch[GT_MTL_S_COUNT];
    gt_mtl_wref tok, out, *lw;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkPipeline pipe[GT_MTL_K_COUNT];
    VkDescriptorPool dpool;
    VkCommandBuffer cb;
    VkFence fence;
    gt_mtl_dispatch *ds;
    size_t max_ds;
} runner;

static int fail(const char *what) {
    printf("test_metal_step_vk: FAILED: %s\n", what);
    return 1;
}

static int make_pipelines(runner *r) {
    gt_vk_ctx *c = r->c;
    VkDescriptorSetLayoutBinding b[GT_MTL_N_BIND];
    for (uint32_t i = 0; i < GT_MTL_N_BIND; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = GT_MTL_N_BIND,
        .pBindings = b};
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
    if (c->f.CreateDescriptorSetLayout(c->dev, &dci, NULL, &r->dsl) != VK_SUCCESS) return 1;
    const VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                             .setLayoutCount = 1, .pSetLayouts = &r->dsl,
                                             .pushConstantRangeCount = 1,
                                             .pPushConstantRanges = &pcr};
    if (c->f.CreatePipelineLayout(c->dev, &plci, NULL, &r->pl) != VK_SUCCESS) return 1;
    for (int k = 0; k < GT_MTL_K_COUNT; k++)
        if (gt_vk_pipeline_make(c, gt_vk_spv_find(gt_mtl_kernels[k].name), r->pl, NULL, 0, &r->pipe[k])) return 1;
    const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                     (uint32_t)r->max_ds * GT_MTL_N_BIND};
    const VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = (uint32_t)r->max_ds, .poolSizeCount = 1,
                                             .pPoolSizes = &ps};
    if (c->f.CreateDescriptorPool(c->dev, &dpci, NULL, &r->dpool) != VK_SUCCESS) return 1;
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = c->pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (c->f.AllocateCommandBuffers(c->dev, &cai, &r->cb) != VK_SUCCESS) return 1;
    return c->f.CreateFence(c->dev, &fci, NULL, &r->fence) != VK_SUCCESS;
}

/* One pass, as metal.m's run_pass: the plan's dispatches, then the wanted rows' logits. */
static int run_pass(runner *r, const gt_mtl_row *rows, const int32_t *session, int32_t n,
                    kvs *const *kv, FILE *out) {
    gt_vk_ctx *c = r->c;
    const gt_config *cf = &r->m->cfg;
    gt_mtl_group groups[GT_MTL_MAX_ROWS];
    kvs *gkv[GT_MTL_MAX_ROWS];
    int32_t n_groups = 0;
    for (int32_t t = 0; t < n; t++) {
        if (t == 0 || session[t] != session[t - 1]) {
            kvs *k = kv[session[t]];
            gkv[n_groups] = k;
            groups[n_groups++] = (gt_mtl_group){t, 0, k->lay.mode, k->lay.layer_bytes,
                                                k->lay.k_bytes};
        }
        groups[n_groups - 1].n++;
    }
    uint32_t gather_at = 0, rope_at = 0;
    const int32_t n_lg = gt_mtl_step_inputs(cf, r->m->inv_freq_global, rows, n,
                                            r->scratch[GT_MTL_S_IN].map, &gather_at, &rope_at);
    const gt_mtl_step_in in = {cf, &r->tok, &r->out, r->lw, groups, n_groups, n, n_lg,
                               gather_at, rope_at, MAX_SEQ};
    gt_err err = {0};
    const size_t nd = gt_mtl_step_plan(&in, r->ds, r->max_ds, &err);
    if (nd == 0) return fail(err.msg);
    c->f.ResetDescriptorPool(c->dev, r->dpool, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (c->f.ResetCommandBuffer(r->cb, 0) != VK_SUCCESS ||
        c->f.BeginCommandBuffer(r->cb, &bi) != VK_SUCCESS)
        return fail("begin");
    for (size_t i = 0; i < nd; i++) {
        const gt_mtl_dispatch *d = &r->ds[i];
        const VkDescriptorSetAllocateInfo ai = {
            .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = r->dpool,
            .descriptorSetCount = 1, .pSetLayouts = &r->dsl};
        VkDescriptorSet set;
        if (c->f.AllocateDescriptorSets(c->dev, &ai, &set) != VK_SUCCESS) return fail("sets");
        VkDescriptorBufferInfo dbi[GT_MTL_N_BIND];
        VkWriteDescriptorSet wr[GT_MTL_N_BIND];
        uint32_t nw = 0;
        for (uint32_t b = 0; b < GT_MTL_N_BIND; b++) { /* only what the plan binds */
            const gt_mtl_bind *bd = &d->bind[b];
            VkBuffer buf = VK_NULL_HANDLE;
            if (bd->kind == GT_MTL_BUF_SCRATCH) buf = r->scratch[bd->index].b;
            else if (bd->kind == GT_MTL_BUF_WEIGHT) buf = r->views[bd->index].b;
            else if (bd->kind == GT_MTL_BUF_KV) buf = gkv[bd->index]->b.b;
            else continue;
            dbi[nw] = (VkDescriptorBufferInfo){buf, bd->offset, VK_WHOLE_SIZE};
            wr[nw] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                            .dstSet = set, .dstBinding = b, .descriptorCount = 1,
                                            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                            .pBufferInfo = &dbi[nw]};
            nw++;
        }
        c->f.UpdateDescriptorSets(c->dev, nw, wr, 0, NULL);
        c->f.CmdBindPipeline(r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->pipe[d->kernel]);
        c->f.CmdBindDescriptorSets(r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->pl, 0, 1, &set, 0,
                                   NULL);
        c->f.CmdPushConstants(r->cb, r->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, d->pc_bytes, d->pc);
        c->f.CmdDispatch(r->cb, d->groups_x, d->groups_y, 1);
        const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT |
                                                     VK_ACCESS_SHADER_WRITE_BIT |
                                                     VK_ACCESS_HOST_READ_BIT};
        c->f.CmdPipelineBarrier(r->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                                0, 1, &mb, 0, NULL, 0, NULL);
    }
    if (c->f.EndCommandBuffer(r->cb) != VK_SUCCESS) return fail("end");
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                             .pCommandBuffers = &r->cb};
    if (c->f.ResetFences(c->dev, 1, &r->fence) != VK_SUCCESS ||
        c->f.QueueSubmit(c->queue, 1, &si, r->fence) != VK_SUCCESS ||
        c->f.WaitForFences(c->dev, 1, &r->fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS)
        return fail("submit");
    const size_t nv = (size_t)cf->n_vocab;
    if (fwrite(r->scratch[GT_MTL_S_LG].map, sizeof(float) * nv, (size_t)n_lg, out) !=
        (size_t)n_lg)
        return fail("write");
    return 0;
}

static int run(const char *path, const char *out_path, uint64_t max_buffer, int32_t mode_a,
               int32_t mode_b) {
    geist_engine_options eo;
    geist_engine_options_default(&eo);
    eo.backend = "cpu_scalar";
    geist_engine *eng = NULL;
    geist_model *m = NULL;
    if (geist_engine_create(&eo, &eng) != GEIST_OK) return fail("engine");
    if (geist_model_load_file(eng, path, NULL, &m) != GEIST_OK) return fail("model");
    const gt_config *cf = &m->cfg;
    char why[256];
    gt_mtl_check_model(m, why, sizeof why);
    if (why[0]) return fail(why);
    runner r;
    memset(&r, 0, sizeof r);
    r.m = m;
    gt_err err = {0};
    const gt_dev_options vo = {0};
    if (gt_vk_ctx_create(&vo, &r.c, &err) != GEIST_OK) return fail(err.msg);
    gt_vk_ctx *c = r.c;
    int rc = 0;
    /* the weights as metal.m plans them (load(path): a read-only file mapping) */
    if (gt_mtl_plan_gguf(&m->gguf, 4096, max_buffer, false, false, &r.plan, &err) != GEIST_OK)
        return fail(err.msg);
    printf("test_metal_step_vk: %d views (mode %d) of %llu bytes\n", (int)r.plan.n_views,
           (int)r.plan.mode, (unsigned long long)max_buffer);
    r.views = calloc((size_t)r.plan.n_views + 1, sizeof *r.views);
    for (int32_t k = 0; k < r.plan.n_views && !rc; k++) {
        rc = hbuf_make(c, r.plan.views[k].length, &r.views[k]);
        if (!rc)
            memcpy(r.views[k].map, (const void *)(uintptr_t)r.plan.views[k].addr,
                   (size_t)r.plan.views[k].length);
    }
    r.lw = calloc((size_t)cf->n_layer * GT_MTL_W_PER_LAYER, sizeof *r.lw);
    bool ok = !rc && gt_mtl_wref_of(&m->gguf, &r.plan, &m->tok_embd, &r.tok) &&
              gt_mtl_wref_of(&m->gguf, &r.plan, &m->output, &r.out);
    for (int32_t il = 0; ok && il < cf->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        const gt_weight *ws[GT_MTL_W_PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                                   &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; ok && i < GT_MTL_W_PER_LAYER; i++)
            ok = gt_mtl_wref_of(&m->gguf, &r.plan, ws[i], &r.lw[il * GT_MTL_W_PER_LAYER + i]);
    }
    if (!ok) return fail("weights");
    uint64_t sb[GT_MTL_S_COUNT];
    gt_mtl_scratch_bytes(cf, GT_MTL_MAX_ROWS, MAX_SEQ, sb);
    for (int i = 0; i < GT_MTL_S_COUNT && !rc; i++) rc = hbuf_make(c, sb[i], &r.scratch[i]);
    if (rc) return fail("scratch");
    float *nw = r.scratch[GT_MTL_S_NORMS].map;
    const size_t d = (size_t)cf->d_model;
    for (int32_t il = 0; il < cf->n_layer; il++) {
        memcpy(nw + 2 * (size_t)il * d, m->layers[il].attn_norm.data, d * sizeof(float));
        memcpy(nw + (2 * (size_t)il + 1) * d, m->layers[il].ffn_norm.data, d * sizeof(float));
    }
    memcpy(nw + 2 * (size_t)cf->n_layer * d, m->output_norm.data, d * sizeof(float));
    r.max_ds = gt_mtl_step_max_dispatches(cf->n_layer, GT_MTL_MAX_ROWS);
    r.ds = calloc(r.max_ds, sizeof *r.ds);
    if (make_pipelines(&r)) return fail("pipelines");
    kvs ka, kb;
    const uint64_t nkv = (uint64_t)cf->n_head_kv, hk = (uint64_t)cf->head_dim_k;
    const uint64_t hv = (uint64_t)cf->head_dim_v;
    if (gt_mtl_kv_plan(mode_a, MAX_SEQ, cf->n_layer, nkv, hk, hv, UINT64_MAX, &ka.lay, &err) ||
        gt_mtl_kv_plan(mode_b, MAX_SEQ, cf->n_layer, nkv, hk, hv, UINT64_MAX, &kb.lay, &err))
        return fail(err.msg);
    if (hbuf_make(c, ka.lay.total, &ka.b) || hbuf_make(c, kb.lay.total, &kb.b))
        return fail("kv");
    kvs *const kv[2] = {&ka, &kb};
    FILE *out = fopen(out_path, "wb");
    if (!out) return fail("open the output");
    gt_mtl_row rows[16];
    int32_t session[16];
    for (int32_t t = 0; t < 8; t++) {
        rows[t] = (gt_mtl_row){PROMPT_A[t], t, true};
        session[t] = 0;
    }
    rc = run_pass(&r, rows, session, 8, kv, out);
    rows[0] = (gt_mtl_row){NEXT_A, 8, true};
    session[0] = 0;
    for (int32_t t = 0; t < 5; t++) {
        rows[1 + t] = (gt_mtl_row){PROMPT_B[t], t, t == 4};
        session[1 + t] = 1;
    }
    if (!rc) rc = run_pass(&r, rows, session, 6, kv, out);
    fclose(out);
    /* teardown */
    hbuf_free(c, &ka.b);
    hbuf_free(c, &kb.b);
    for (int i = 0; i < GT_MTL_S_COUNT; i++) hbuf_free(c, &r.scratch[i]);
    for (int32_t k = 0; k < r.plan.n_views; k++) hbuf_free(c, &r.views[k]);
    for (int k = 0; k < GT_MTL_K_COUNT; k++)
        if (r.pipe[k]) c->f.DestroyPipeline(c->dev, r.pipe[k], NULL);
    c->f.DestroyPipelineLayout(c->dev, r.pl, NULL);
    c->f.DestroyDescriptorSetLayout(c->dev, r.dsl, NULL);
    c->f.DestroyDescriptorPool(c->dev, r.dpool, NULL);
    c->f.DestroyFence(c->dev, r.fence, NULL);
    c->f.FreeCommandBuffers(c->dev, c->pool, 1, &r.cb);
    free(r.views);
    free(r.lw);
    free(r.ds);
    gt_mtl_plan_free(&r.plan);
    gt_vk_ctx_free(c);
    geist_model_free(m);
    geist_engine_free(eng);
    if (!rc) printf("test_metal_step_vk: ok\n");
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        printf("test_metal_step_vk: skipped (run by tests/core/test_metal_step_vk.py, which pins "
               "lavapipe and compares the logits with cpu_scalar's)\n");
        return 0;
    }
    const int32_t mode_a = argc > 4 ? (int32_t)strtol(argv[4], NULL, 10) : GEIST_KV_F16;
    const int32_t mode_b = argc > 5 ? (int32_t)strtol(argv[5], NULL, 10) : GEIST_KV_F32;
    return run(argv[1], argv[2], strtoull(argv[3], NULL, 10), mode_a, mode_b);
}
#else
int main(void) {
    printf("test_metal_step_vk: skipped (built without Vulkan, or the clock build)\n");
    return 0;
}
#endif
