/*
 * recipe.h - the kernels a runtime really launches for a segment, and the
 * activations its autograd really keeps.
 *
 * A recipe is a runtime's way of computing the same Llama decoder:
 *   testbed  this project's fused kernels (core/model.c: the kernel lists
 *            and the activation store table the reference and the CUDA
 *            model share);
 *   eager    PyTorch eager as torchtitan's Llama 3 runs it: every ATen op
 *            its own kernel (RMSNorm through _fused_rms_norm, RoPE through
 *            complex multiplication with fp32 copies, GQA keys and values
 *            expanded by a copy, SDPA with the flash backend, SwiGLU as
 *            silu then mul, residual adds, the loss upcasting the logits
 *            to fp32 before log_softmax), and autograd's saved tensors;
 *   compile  the same model under torch.compile (Inductor): the chains of
 *            element-wise ops fused into one kernel each, matmuls and SDPA
 *            left to the libraries, the loss one fused reduction.
 * The sources of each op and of what it saves are cited in catalog.ini
 * ([runtime pytorch], [runtime pytorch-compile]) and in recipe.c.
 *
 * Checkpointing is defined on the recipe's op list, so the recompute
 * kernels and the bytes kept move together:
 *   AC_NONE       every tensor some op's backward reads is kept;
 *   AC_FULL       the block's input only; recompute runs forward again up
 *                 to the last op that saves a tensor (torch.utils.checkpoint
 *                 stops early there: an op saves its inputs before it runs);
 *   AC_SELECTIVE  the input and the outputs of every matmul and attention;
 *   AC_PER_OP     torchtitan's per-op policy: the input, the attention's
 *                 outputs and those of every other matmul (the 1st, 3rd, ...
 *                 of the block), recomputing the rest.
 * AC_PER_LAYER is not a block's mode: the schedule gives each block
 * AC_FULL or AC_NONE (policy.h).
 */
#ifndef CORE_RECIPE_H
#define CORE_RECIPE_H

#include <stdint.h>
#include "model.h"

enum kernel_recipe { KR_TESTBED, KR_EAGER, KR_COMPILE, KR_COUNT };

extern const char *const kernel_recipe_names[]; /* "testbed", "eager", "compile" */

/* The attention kernel a runtime launches: this project's, FlashAttention-2 or cuDNN (through SDPA). */
enum attention_kernel { AK_TESTBED, AK_FLASH, AK_CUDNN, AK_COUNT };
extern const char *const attention_kernel_names[];

/*
 * The kernels of one segment in one phase, in launch order, for `batch`
 * sequences: model_segment_kernels() for KR_TESTBED. ac is the block's own
 * mode (never AC_PER_LAYER); KR_TESTBED takes the store table's modes only
 * (ac < AC_COUNT). Returns the count written to out (at most max).
 */
int recipe_kernels(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
		   enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes, struct kernel *out,
		   int max);

/* Bytes a segment keeps from forward to backward: model_segment_saved_bytes() for KR_TESTBED. */
uint64_t recipe_saved_bytes(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			    enum ac_mode ac, enum loss_mode loss, int act_bytes);

/*
 * The transient tensors of a segment's phase, each an allocation of its
 * own (out[], at most RECIPE_TRANSIENT_MAX; returns how many): PyTorch
 * allocates every tensor apart, so a runtime's allocator serves them one by
 * one, and blocks of one size are reused for another tensor of that size.
 * KR_TESTBED: one, model_segment_transient_bytes() (the testbed's scratch
 * region). Eager and compiled blocks: PH_RECOMPUTE what recompute rebuilds
 * (the tensors backward reads that the mode did not keep), PH_FWD the same
 * under a checkpointing mode, else the temporaries forward makes and frees;
 * PH_BWD the testbed's activation-gradient fields (autograd frees each
 * gradient as it goes; its peak is not modelled op by op). The head under
 * LOSS_FULL: eager holds the bf16 and the fp32 logits at once in forward;
 * in backward, after the loss's own backward (recipe_loss_backward), the
 * bf16 gradient of the logits.
 */
#define RECIPE_TRANSIENT_MAX 32
int recipe_transient_tensors(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			     enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes,
			     uint64_t out[RECIPE_TRANSIENT_MAX]);
int recipe_saved_tensors(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			 enum ac_mode ac, enum loss_mode loss, int act_bytes, uint64_t out[RECIPE_TRANSIENT_MAX]);
/* The sum of recipe_transient_tensors(). */
uint64_t recipe_transient_bytes(enum kernel_recipe r, const struct model_shape *m, int batch,
				enum segment_kind s, enum phase ph, enum ac_mode ac, enum loss_mode loss,
				int act_bytes);

/*
 * The loss's own backward, which autograd runs before the head's (eager
 * PyTorch: nll_loss's, log_softmax's and the fp32 cast's backward nodes;
 * torch/csrc/autograd/engine.cpp runs a node once its inputs are ready,
 * and frees a node's input gradients and saved tensors once it has run):
 * its fp32 gradients of the logits come and go before the output GEMM's
 * backward makes the weight's gradient, so the two are never alive at
 * once. Returns how many of the leading kernels of recipe_kernels(SEG_HEAD,
 * PH_BWD) it runs, 0 when the runtime's head backward is one piece (the
 * testbed's fused loss, the compiled loss, the chunked loss); its
 * transient tensors in out[] (*n of them).
 */
int recipe_loss_backward(enum kernel_recipe r, const struct model_shape *m, int batch, enum loss_mode loss,
			 int act_bytes, uint64_t out[RECIPE_TRANSIENT_MAX], int *n);

/*
 * Where the head's logits (batch x seq x vocab in the compute dtype, the
 * output GEMM's result) are among the tensors above, for a training loop
 * that keeps a reference to them (policy.hold_logits): 1 among its saved
 * bytes (compiled: the loss's backward reads them), 0 the forward's first
 * transient tensor (eager: freed once cast to fp32), -1 when the runtime
 * makes no such tensor (the testbed's fused loss, the chunked loss).
 * *bytes gets their allocation's size.
 */
int recipe_head_logits(enum kernel_recipe r, const struct model_shape *m, int batch, enum loss_mode loss,
		       int act_bytes, uint64_t *bytes);

/* Every saved tensor is an allocation of its own, rounded as PyTorch's caching allocator rounds (512 bytes). */
#define RECIPE_TENSOR_ALIGN 512

#endif
