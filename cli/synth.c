/*
 * synth.c: the workload generator. A small transformer layout (embedding,
 * per-layer attention and MLP matrices, norms, LM head) with FP32 masters;
 * each step draws gradients with per-element sign persistence (AR(1)),
 * applies Adam (beta 0.9/0.95) and casts to BF16. Embedding rows get a
 * gradient only for the tokens of the step's batch (lazy Adam), so unused
 * rows do not change. Everything is a function of (seed, tensor, step,
 * element), so any thread count gives the same bytes.
 */
#define _GNU_SOURCE
#include "synth.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"

enum kind { K_MATRIX, K_NORM, K_EMBED };

typedef struct stensor {
	char name[96];
	enum kind kind;
	uint64_t rows, cols;
	uint64_t off;      /* element offset in the flat arrays */
	float gscale;      /* gradient scale of this tensor */
} stensor;

struct synth {
	synth_opts o;
	stensor *t;
	size_t nt;
	uint64_t n;
	float *w, *m, *v, *g;
	uint64_t step;
};

static inline uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Approximately standard normal from 64 random bits (Irwin-Hall of four
 * 16-bit uniforms, rescaled): cheap and deterministic. */
static inline float gauss(uint64_t r)
{
	float s = (float)(r & 0xFFFF) + (float)((r >> 16) & 0xFFFF) +
		  (float)((r >> 32) & 0xFFFF) + (float)(r >> 48);
	return (s / 65536.0f - 2.0f) * 1.7320508f;
}

static void add(synth *s, const char *name, enum kind k, uint64_t r, uint64_t c)
{
	stensor *t = &s->t[s->nt++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->kind = k;
	t->rows = r;
	t->cols = c;
	t->off = s->n;
	/* per-tensor gradient scales vary, as layer gradients do */
	t->gscale = (float)(0.5 + (double)(mix(s->o.seed + s->nt) % 1000) / 1000.0);
	s->n += r * c;
}

typedef struct work {
	synth *s;
	model *bf;
	int init;
	atomic_size_t next;
} work;

#define BLK (1u << 16)

static void do_block(synth *s, const stensor *t, uint64_t b, uint64_t e, int init)
{
	const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, rho = 0.8f;
	const float rho_c = sqrtf(1.0f - rho * rho);
	const float lr = (float)s->o.lr;
	const float bc1 = 1.0f - powf(b1, (float)s->step);
	const float bc2 = 1.0f - powf(b2, (float)s->step);
	uint64_t tid = (uint64_t)(t - s->t) + 1;
	uint64_t active_salt = mix(s->o.seed ^ (s->step * 0x9E37u) ^ (tid << 40));
	for (uint64_t i = b; i < e; i++) {
		uint64_t r = mix(s->o.seed * 0x100000001B3ull ^ (tid << 48) ^ (i * 0x9E3779B97F4A7C15ull) ^
				 (s->step << 20));
		uint64_t x = t->off + i;
		if (init) {
			float w;
			if (t->kind == K_NORM)
				w = 1.0f + 0.02f * gauss(r);
			else
				w = 0.02f * gauss(r);
			if (s->o.ongrid) {
				uint32_t u;
				memcpy(&u, &w, 4);
				u = (uint32_t)synth_bf16(u) << 16;
				memcpy(&w, &u, 4);
			}
			s->w[x] = w;
			s->m[x] = s->v[x] = 0;
			s->g[x] = gauss(mix(r + 1));
			continue;
		}
		if (t->kind == K_EMBED) {
			/* about 5% of the rows (tokens) appear in a step's batch */
			uint64_t row = i / t->cols;
			if (mix(active_salt ^ row) % 100 >= 5)
				continue;
		}
		float g = rho * s->g[x] + rho_c * gauss(r);
		s->g[x] = g;
		g *= t->gscale;
		s->m[x] = b1 * s->m[x] + (1 - b1) * g;
		s->v[x] = b2 * s->v[x] + (1 - b2) * g * g;
		float mh = s->m[x] / bc1, vh = s->v[x] / bc2;
		s->w[x] -= lr * mh / (sqrtf(vh) + eps);
	}
}

static void *worker(void *arg)
{
	work *wk = arg;
	synth *s = wk->s;
	for (;;) {
		size_t idx = atomic_fetch_add(&wk->next, 1);
		uint64_t b = (uint64_t)idx * BLK;
		if (b >= s->n)
			break;
		uint64_t e = b + BLK < s->n ? b + BLK : s->n;
		/* blocks are split at tensor boundaries */
		for (size_t k = 0; k < s->nt && b < e; k++) {
			const stensor *t = &s->t[k];
			uint64_t te = t->off + t->rows * t->cols;
			if (te <= b || t->off >= e)
				continue;
			uint64_t lo = b > t->off ? b : t->off, hi = e < te ? e : te;
			do_block(s, t, lo - t->off, hi - t->off, wk->init);
		}
		for (uint64_t x = b; x < e; x++) {
			uint32_t u;
			memcpy(&u, &s->w[x], 4);
			wk->bf->params[x] = synth_bf16(u);
		}
	}
	return NULL;
}

static void run(synth *s, model *bf, int init)
{
	work wk = {.s = s, .bf = bf, .init = init};
	atomic_init(&wk.next, 0);
	int n = s->o.threads > 0 ? s->o.threads : cpu_count();
	pthread_t tid[64];
	int started = 0;
	for (int i = 0; i < n && i < 64; i++)
		if (pthread_create(&tid[i], NULL, worker, &wk) == 0)
			started++;
	if (!started)
		worker(&wk);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
}

static int build_header(synth *s, model *bf, char *err, size_t errlen)
{
	size_t cap = 256 + s->nt * 200, len = 0;
	char *j = malloc(cap);
	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	len += (size_t)snprintf(j + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (size_t i = 0; i < s->nt; i++) {
		const stensor *t = &s->t[i];
		uint64_t b = t->off * 2, e = (t->off + t->rows * t->cols) * 2;
		if (t->kind == K_NORM)
			len += (size_t)snprintf(j + len, cap - len,
				",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu],\"data_offsets\":[%llu,%llu]}",
				t->name, (unsigned long long)t->cols, (unsigned long long)b,
				(unsigned long long)e);
		else
			len += (size_t)snprintf(j + len, cap - len,
				",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu,%llu],\"data_offsets\":[%llu,%llu]}",
				t->name, (unsigned long long)t->rows, (unsigned long long)t->cols,
				(unsigned long long)b, (unsigned long long)e);
	}
	len += (size_t)snprintf(j + len, cap - len, "}");
	while (len % 8)
		j[len++] = ' '; /* safetensors pads the header to 8 bytes */
	uint8_t *h = malloc(8 + len);
	if (!h) {
		free(j);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)((uint64_t)len >> (8 * i));
	memcpy(h + 8, j, len);
	free(j);
	int rc = model_parse_safetensors(bf, h, 8 + len, 8 + len + s->n * 2, err, errlen);
	if (rc) {
		free(h);
		return -1;
	}
	bf->header = h;
	return 0;
}

synth *synth_new(const synth_opts *o, model *bf, char *err, size_t errlen)
{
	synth *s = calloc(1, sizeof(*s));
	err[0] = 0;
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->o = *o;
	/* ~64 d^2 parameters for 4 layers with vocab 8d and a 8d/3 MLP */
	uint64_t d = (uint64_t)sqrt((double)o->params / 64.0);
	d = d < 64 ? 64 : d / 64 * 64;
	uint64_t f = (d * 8 / 3 + 63) / 64 * 64, vocab = 8 * d, layers = 4;
	s->t = calloc(4 + layers * 9, sizeof(stensor));
	if (!s->t) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	char nm[96];
	add(s, "model.embed_tokens.weight", K_EMBED, vocab, d);
	for (uint64_t l = 0; l < layers; l++) {
		static const char *const attn[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
		snprintf(nm, sizeof(nm), "model.layers.%llu.input_layernorm.weight", (unsigned long long)l);
		add(s, nm, K_NORM, 1, d);
		for (int a = 0; a < 4; a++) {
			snprintf(nm, sizeof(nm), "model.layers.%llu.self_attn.%s.weight", (unsigned long long)l, attn[a]);
			add(s, nm, K_MATRIX, d, d);
		}
		snprintf(nm, sizeof(nm), "model.layers.%llu.post_attention_layernorm.weight", (unsigned long long)l);
		add(s, nm, K_NORM, 1, d);
		snprintf(nm, sizeof(nm), "model.layers.%llu.mlp.gate_proj.weight", (unsigned long long)l);
		add(s, nm, K_MATRIX, f, d);
		snprintf(nm, sizeof(nm), "model.layers.%llu.mlp.up_proj.weight", (unsigned long long)l);
		add(s, nm, K_MATRIX, f, d);
		snprintf(nm, sizeof(nm), "model.layers.%llu.mlp.down_proj.weight", (unsigned long long)l);
		add(s, nm, K_MATRIX, d, f);
	}
	add(s, "model.norm.weight", K_NORM, 1, d);
	add(s, "lm_head.weight", K_MATRIX, vocab, d);
	s->w = malloc(s->n * 4);
	s->m = malloc(s->n * 4);
	s->v = malloc(s->n * 4);
	s->g = malloc(s->n * 4);
	if (!s->w || !s->m || !s->v || !s->g || build_header(s, bf, err, errlen)) {
		if (!err[0])
			snprintf(err, errlen, "out of memory for %llu parameters",
				 (unsigned long long)s->n);
		synth_free(s);
		return NULL;
	}
	bf->params = alloc_aligned(s->n * 2);
	if (!bf->params) {
		snprintf(err, errlen, "out of memory");
		model_free(bf);
		synth_free(s);
		return NULL;
	}
	run(s, bf, 1);
	return s;
}

void synth_step(synth *s, model *bf)
{
	s->step++;
	run(s, bf, 0);
}

void synth_free(synth *s)
{
	if (!s)
		return;
	free(s->w);
	free(s->m);
	free(s->v);
	free(s->g);
	free(s->t);
	free(s);
}
