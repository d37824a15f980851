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
 * LOSS_FULL: eager holds the bf16 and the fp32 logits at once in forward,
 * and two fp32 gradients of the logits in backward.
 */
#define RECIPE_TRANSIENT_MAX 32
int recipe_transient_tensors(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			     enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes,
			     uint64_t out[RECIPE_TRANSIENT_MAX]);
/* The sum of recipe_transient_tensors(). */
uint64_t recipe_transient_bytes(enum kernel_recipe r, const struct model_shape *m, int batch,
				enum segment_kind s, enum phase ph, enum ac_mode ac, enum loss_mode loss,
				int act_bytes);

/* Every saved tensor is an allocation of its own, rounded as PyTorch's caching allocator rounds (512 bytes). */
#define RECIPE_TENSOR_ALIGN 512

#endif
