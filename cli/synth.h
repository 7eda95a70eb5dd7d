/*
 * synth.h: a deterministic RL-like training trajectory: FP32 master weights
 * of a transformer-shaped model, Adam with sign-persistent gradients, and a
 * BF16 round-to-nearest-even cast after every step.
 */
#ifndef BFP_SYNTH_H
#define BFP_SYNTH_H

#include <stdint.h>

#include "model.h"

typedef struct synth_opts {
	uint64_t params;     /* approximate parameter count */
	double lr;           /* Adam learning rate */
	int ongrid;          /* master starts on the BF16 grid */
	uint64_t seed;
	int threads;
} synth_opts;

typedef struct synth synth;

/* Create the model (step 0) and its BF16 view in *bf16 (a safetensors
 * model whose params the trajectory updates in place). */
synth *synth_new(const synth_opts *o, model *bf16, char *err, size_t errlen);

/* One optimizer step; refreshes bf16->params. */
void synth_step(synth *s, model *bf16);

void synth_free(synth *s);

/* Round-to-nearest-even FP32 -> BF16 on the bit pattern (NaN kept quiet). */
static inline uint16_t synth_bf16(uint32_t f)
{
	if ((f & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((f >> 16) | 0x40u);
	return (uint16_t)((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

#endif
