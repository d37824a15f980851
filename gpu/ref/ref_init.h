/*
 * ref_init.h - seeded random fills for the reference's parameters and test
 * inputs, from GSL's generators (the project's rule: random numbers come
 * from the stack's libraries). Kept apart from ref.h so the model code
 * needs only libc and libm; the CUDA checks use the same fills, so both
 * sides start from identical numbers.
 */
#ifndef GPU_REF_INIT_H
#define GPU_REF_INIT_H

#include <stddef.h>

#include <gsl/gsl_rng.h>

#include "ref.h"

/* p[i] ~ mean + N(0, std^2). */
void ref_fill_normal(float *p, size_t n, float mean, float std, gsl_rng *r);
/* p[i] ~ U[lo, hi). */
void ref_fill_uniform(float *p, size_t n, float lo, float hi, gsl_rng *r);
/* tokens[i] ~ U{0 .. V-1}. */
void ref_fill_tokens(int *tokens, size_t n, int V, gsl_rng *r);

/*
 * Parameters of a model: norm weights 1, the embedding N(0, 1) so the
 * residual stream starts at unit scale, every other weight
 * N(0, 1 / fan_in) scaled by gain (gain 1 keeps activations near unit
 * scale through a few blocks, the regime the gradient checks want).
 */
void ref_init_params(const struct ref_model *model, float gain, gsl_rng *r);

#endif
